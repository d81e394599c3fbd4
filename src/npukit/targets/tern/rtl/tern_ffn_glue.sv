// FFN glue for one token, written for npukit from its unit model
// (npukit.targets.tern.units.ffn_glue_unit):
//   N_i  = relu(g_i)^2 * u_i * w_i                 (signed, < 2^88)
//   M    = max(max_i |N_i|, 1),  R = bitlen(M) + 24
//   recip = (127 << R) / M                         (one restoring divide, a quotient bit a cycle)
//   h_i  = sign(N_i) * min((|N_i| * recip + 2^(R-1)) >> R, 127)
// Pass 1 reads g, u, w and computes N through read / relu^2 / *u / *w / |.|+max stages, keeping
// |N_i| and its sign; the divider loads and runs 128 cycles; pass 2 reads |N_i| back through
// read / multiply-round / shift-clip-write stages. done one cycle after pass 2.
module tern_ffn_glue #(
    parameter int F_MAX = 8192,
    parameter int FW = $clog2(F_MAX)
) (
    input  logic               clk,
    input  logic               rst_n,
    input  logic               start,
    input  logic [15:0]        f_len,
    input  logic               g_we,
    input  logic [FW-1:0]      g_addr,
    input  logic signed [31:0] g_data,
    input  logic               u_we,
    input  logic [FW-1:0]      u_addr,
    input  logic signed [31:0] u_data,
    input  logic               w_we,
    input  logic [FW-1:0]      w_addr,
    input  logic signed [15:0] w_data,
    input  logic [FW-1:0]      h_addr,
    output logic signed [7:0]  h_data,
    output logic [87:0]        amax,
    output logic               busy,
    output logic               done,
    output logic [31:0]        cycles
);
    logic signed [31:0] gmem [F_MAX];
    logic signed [31:0] umem [F_MAX];
    logic signed [15:0] wmem [F_MAX];
    logic [87:0]        magmem [F_MAX];
    logic               negmem [F_MAX];
    logic signed [7:0]  hmem [F_MAX];

    always_ff @(posedge clk) begin
        if (g_we) gmem[g_addr] <= g_data;
        if (u_we) umem[u_addr] <= u_data;
        if (w_we) wmem[w_addr] <= w_data;
        h_data <= hmem[h_addr];
    end

    typedef enum logic [2:0] {IDLE, PASS1, DIVIDE, PASS2, FIN} state_t;
    state_t state;
    logic [15:0] n;

    // pass 1 pipe
    logic               a_valid, b_valid, c_valid, d_valid;
    logic [FW-1:0]      a_i, b_i, c_i, d_i;
    logic signed [31:0] a_g, a_u, b_u;
    logic signed [15:0] a_w, b_w, c_w;
    logic [41:0]        b_r2;
    logic signed [95:0] c_t, d_n;
    logic [87:0]        m;
    wire  [20:0]        relu_g = a_g < 0 ? 21'd0 : a_g[20:0];
    wire  [87:0]        d_mag = 88'(d_n < 0 ? -d_n : d_n);

    // divider
    logic [127:0] dividend, rem, quo;
    logic [6:0]   r_shift;
    logic [7:0]   bit_i;
    logic [6:0]   m_bits;
    always_comb begin
        m_bits = 7'd0;
        for (int b = 0; b < 88; b++) if (m[b]) m_bits = 7'(b + 1);
    end
    wire [127:0] rem_shifted = {rem[126:0], dividend[bit_i[6:0]]};

    // pass 2 pipe
    logic               p_valid, q_valid;
    logic [FW-1:0]      p_i, q_i;
    logic [87:0]        p_mag;
    logic               p_neg, q_neg;
    logic [127:0]       q_prod;
    wire  [127:0]       q_shifted = q_prod >> r_shift;
    wire  [7:0]         q_h = q_shifted > 128'd127 ? 8'd127 : q_shifted[7:0];

    always_ff @(posedge clk or negedge rst_n) begin
        if (!rst_n) begin
            state <= IDLE; busy <= 1'b0; done <= 1'b0; cycles <= '0; n <= '0;
            a_valid <= 1'b0; b_valid <= 1'b0; c_valid <= 1'b0; d_valid <= 1'b0;
            p_valid <= 1'b0; q_valid <= 1'b0;
        end else begin
            if (busy) cycles <= cycles + 1;
            n <= n + 1;
            // pass 1: read, relu^2, *u, *w, |N| + max
            a_valid <= state == PASS1 && n < f_len;
            a_i <= FW'(n);
            a_g <= gmem[FW'(n)]; a_u <= umem[FW'(n)]; a_w <= wmem[FW'(n)];
            b_valid <= a_valid; b_i <= a_i; b_u <= a_u; b_w <= a_w;
            b_r2 <= 42'(relu_g) * 42'(relu_g);
            c_valid <= b_valid; c_i <= b_i; c_w <= b_w;
            c_t <= $signed({54'd0, b_r2}) * 96'(b_u);
            d_valid <= c_valid; d_i <= c_i;
            d_n <= c_t * 96'(c_w);
            if (d_valid) begin
                magmem[d_i] <= d_mag;
                negmem[d_i] <= d_n < 0;
                if (d_mag > m) m <= d_mag;
            end
            // pass 2: read, |N| * recip + half, shift + clip + sign
            p_valid <= state == PASS2 && n < f_len;
            p_i <= FW'(n);
            p_mag <= magmem[FW'(n)];
            p_neg <= negmem[FW'(n)];
            q_valid <= p_valid; q_i <= p_i; q_neg <= p_neg;
            q_prod <= 128'(p_mag) * quo + (128'd1 << (r_shift - 7'd1));
            if (q_valid) hmem[q_i] <= q_neg ? -$signed(q_h) : $signed(q_h);
            case (state)
                IDLE: if (start) begin
                    state <= PASS1; busy <= 1'b1; done <= 1'b0; cycles <= '0; n <= '0;
                    m <= 88'd1;
                end
                PASS1: if (n + 1 == f_len + 16'd4) begin
                    state <= DIVIDE; n <= '0;
                end
                DIVIDE: begin
                    if (n == 0) begin  // load: R from M, the dividend 127 << R
                        r_shift <= m_bits + 7'd24;
                        dividend <= 128'd127 << (m_bits + 7'd24);
                        rem <= '0; quo <= '0; bit_i <= 8'd127;
                    end else begin     // one restoring step per cycle, most significant bit first
                        if (rem_shifted >= 128'(m)) begin
                            rem <= rem_shifted - 128'(m);
                            quo[bit_i[6:0]] <= 1'b1;
                        end else rem <= rem_shifted;
                        bit_i <= bit_i - 8'd1;
                        if (n == 16'd128) begin
                            state <= PASS2; n <= '0;
                        end
                    end
                end
                PASS2: if (n + 1 == f_len + 16'd2) begin
                    state <= FIN; n <= '0;
                end
                FIN: begin
                    state <= IDLE; busy <= 1'b0; done <= 1'b1; amax <= m;
                end
                default: state <= IDLE;
            endcase
        end
    end
endmodule
