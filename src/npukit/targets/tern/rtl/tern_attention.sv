// Integer attention for one query head, written for npukit from its unit model
// (npukit.targets.tern.units.attention_unit, AttentionTiming):
//   s_j   = sum_d q_d * k_jd                      (48-bit)
//   idx_j = min((max_j s_j - s_j) >> shift, 4095)
//   e_j   = EXP[idx_j]                            (4096-entry Q15 table, loaded by the host)
//   num_d = sum_j e_j * v_jd,  sum_e = sum_j e_j
// Phases, each a fixed number of cycles: SCORE streams T*D MACs through a 2-register pipe
// (T*D + 2), EXP runs T look-ups through read / index+table / accumulate (T + 3), AV streams T*D
// MACs (T*D + 2), FIN raises done (1).
// Memories: q[d], k and v at address j*D_MAX + d, the EXP table; num is read back with one cycle of
// latency, sum_e is a port.
module tern_attention #(
    parameter int T_MAX = 64,
    parameter int D_MAX = 128,
    parameter int AW = $clog2(T_MAX * D_MAX)
) (
    input  logic               clk,
    input  logic               rst_n,
    input  logic               start,
    input  logic [7:0]         t_len,
    input  logic [7:0]         d_len,
    input  logic [5:0]         shift,
    input  logic               q_we,
    input  logic [7:0]         q_addr,
    input  logic signed [15:0] q_data,
    input  logic               k_we,
    input  logic [AW-1:0]      k_addr,
    input  logic signed [15:0] k_data,
    input  logic               v_we,
    input  logic [AW-1:0]      v_addr,
    input  logic signed [15:0] v_data,
    input  logic               exp_we,
    input  logic [11:0]        exp_addr,
    input  logic [15:0]        exp_data,
    input  logic [7:0]         num_addr,
    output logic signed [47:0] num_data,
    output logic [31:0]        sum_e,
    output logic               busy,
    output logic               done,
    output logic [31:0]        cycles
);
    logic signed [15:0] qmem [D_MAX];
    logic signed [15:0] kmem [T_MAX * D_MAX];
    logic signed [15:0] vmem [T_MAX * D_MAX];
    logic [15:0]        exptab [4096];
    logic signed [47:0] score [T_MAX];
    logic [15:0]        emem [T_MAX];
    logic signed [47:0] nummem [D_MAX];

    always_ff @(posedge clk) begin
        if (q_we) qmem[q_addr] <= q_data;
        if (k_we) kmem[k_addr] <= k_data;
        if (v_we) vmem[v_addr] <= v_data;
        if (exp_we) exptab[exp_addr] <= exp_data;
        num_data <= nummem[num_addr];
    end

    typedef enum logic [2:0] {IDLE, SCORE, EXP, AV, FIN} state_t;
    state_t state;
    logic [15:0] n, phase_len, issues;      // cycle within the phase, its length, MACs issued
    logic [7:0]  j, dd;                     // issue position (key, dimension)
    logic [AW-1:0] kv_at;
    assign kv_at = AW'(j) * AW'(D_MAX) + AW'(dd);

    // SCORE / AV pipe: stage 1 multiplies, stage 2 accumulates
    logic               p1_valid, p1_last;
    logic [7:0]         p1_j, p1_d;
    logic signed [47:0] p1_prod;
    logic signed [47:0] acc, smax;
    // EXP pipe: stage 1 reads the score, stage 2 indexes the table, stage 3 accumulates
    logic               e1_valid, e2_valid;
    logic [7:0]         e1_j, e2_j;
    logic signed [47:0] e1_s;
    logic [15:0]        e2_e;
    logic [47:0]        drop, drop_shifted;
    assign drop = 48'(smax - e1_s);
    assign drop_shifted = drop >> shift;

    wire issue = (state == SCORE || state == AV) && n < issues;
    wire last_d = dd + 1 == d_len;

    always_ff @(posedge clk or negedge rst_n) begin
        if (!rst_n) begin
            state <= IDLE; busy <= 1'b0; done <= 1'b0; cycles <= '0; n <= '0;
            p1_valid <= 1'b0; e1_valid <= 1'b0; e2_valid <= 1'b0;
        end else begin
            if (busy) cycles <= cycles + 1;
            n <= n + 1;
            // stage 1 of the MAC pipe
            p1_valid <= issue;
            p1_last <= last_d;
            p1_j <= j;
            p1_d <= dd;
            if (state == SCORE) p1_prod <= 48'(qmem[dd] * kmem[kv_at]);
            else p1_prod <= 48'($signed({1'b0, emem[j]}) * vmem[kv_at]);
            if (issue) begin
                dd <= last_d ? 8'd0 : dd + 1;
                j <= last_d ? j + 1 : j;
            end
            // stage 2: SCORE accumulates a key's dot product; AV accumulates into num[d]
            if (p1_valid && state == SCORE) begin
                if (p1_last) begin
                    score[p1_j] <= acc + p1_prod;
                    if (p1_j == 0 || acc + p1_prod > smax) smax <= acc + p1_prod;
                    acc <= '0;
                end else acc <= acc + p1_prod;
            end
            if (p1_valid && state == AV) nummem[p1_d] <= nummem[p1_d] + p1_prod;
            if (state == SCORE && issue && j == 0) nummem[dd] <= '0;
            // EXP pipe
            e1_valid <= state == EXP && n < 16'(t_len);
            e1_j <= n[7:0];
            e1_s <= score[n[7:0]];
            e2_valid <= e1_valid;
            e2_j <= e1_j;
            e2_e <= exptab[drop_shifted > 48'd4095 ? 12'd4095 : drop_shifted[11:0]];
            if (e2_valid) begin
                emem[e2_j] <= e2_e;
                sum_e <= sum_e + 32'(e2_e);
            end
            case (state)
                IDLE: if (start) begin
                    state <= SCORE; busy <= 1'b1; done <= 1'b0; cycles <= '0; n <= '0;
                    j <= '0; dd <= '0; acc <= '0; sum_e <= '0;
                    issues <= 16'(t_len) * 16'(d_len);
                    phase_len <= 16'(t_len) * 16'(d_len) + 16'd2;
                end
                SCORE: if (n + 1 == phase_len) begin
                    state <= EXP; n <= '0; phase_len <= 16'(t_len) + 16'd3;
                end
                EXP: if (n + 1 == phase_len) begin
                    state <= AV; n <= '0; j <= '0; dd <= '0;
                    phase_len <= issues + 16'd2;
                end
                AV: if (n + 1 == phase_len) begin
                    state <= FIN; n <= '0;
                end
                FIN: begin
                    state <= IDLE; busy <= 1'b0; done <= 1'b1;
                end
                default: state <= IDLE;
            endcase
        end
    end
endmodule
