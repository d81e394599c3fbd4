// Test fixture: the shipped attention unit behind a different interface, to exercise the port map's
// vocabulary: other port names, one shared K/V write port with a bank select, active-low write
// enable and go, byte addresses (4 per 16-bit element slot), V stored d-major (element d*64 + j),
// q packed four per 64-bit word, a done pulse, and num as an unpacked array port filled after the
// core finishes.
module alt_attention (
    input  logic               clock,
    input  logic               reset_n,
    input  logic               go_n,
    input  logic [7:0]         cfg_keys,
    input  logic [7:0]         cfg_dim,
    input  logic [5:0]         cfg_shift,
    input  logic               mem_we_n,
    input  logic               mem_bank,      // 0: K, 1: V
    input  logic [15:0]        mem_byte_addr, // element index * 4
    input  logic [15:0]        mem_wdata,
    input  logic               q_we_n,
    input  logic [4:0]         q_word,
    input  logic [63:0]        q_wdata,
    input  logic               lut_we_n,
    input  logic [11:0]        lut_addr,
    input  logic [15:0]        lut_wdata,
    output logic signed [47:0] ctx_num [16],
    output logic [31:0]        ctx_den,
    output logic               finished
);
    logic [1:0]  qk;        // q element being written from the current 64-bit word
    logic        core_start, core_done, core_busy;
    logic [7:0]  rd_addr;
    logic signed [47:0] rd_data;
    logic [31:0] core_cycles;

    // q words arrive four elements at a time: write them into the core one per cycle is not possible
    // through its single port, so the wrapper keeps q itself and feeds the core during a preload
    logic signed [15:0] qbuf [128];
    always_ff @(posedge clock) if (!q_we_n) for (int e = 0; e < 4; e++)
        qbuf[{q_word, 2'(e)}] <= q_wdata[16*e +: 16];

    logic        feeding;
    logic [7:0]  feed_i;
    // V arrives d-major: element index d*64 + j goes to the core's j*128 + d
    wire [13:0]  v_idx = 14'(mem_byte_addr >> 2);
    wire [12:0]  v_at = 13'({7'd0, v_idx[5:0]} * 13'd128 + 13'(v_idx[13:6]));
    tern_attention #(.T_MAX(64), .D_MAX(128)) core (
        .clk(clock), .rst_n(reset_n), .start(core_start), .t_len(cfg_keys), .d_len(cfg_dim),
        .shift(cfg_shift),
        .q_we(feeding), .q_addr(feed_i), .q_data(qbuf[feed_i[6:0]]),
        .k_we(!mem_we_n && !mem_bank), .k_addr(13'(mem_byte_addr >> 2)), .k_data(mem_wdata),
        .v_we(!mem_we_n && mem_bank), .v_addr(v_at), .v_data(mem_wdata),
        .exp_we(!lut_we_n), .exp_addr(lut_addr), .exp_data(lut_wdata),
        .num_addr(rd_addr), .num_data(rd_data), .sum_e(ctx_den), .busy(core_busy), .done(core_done),
        .cycles(core_cycles));

    typedef enum logic [1:0] {IDLE, FEED, RUN, COPY} phase_t;
    phase_t phase;
    assign feeding = phase == FEED;

    always_ff @(posedge clock or negedge reset_n) begin
        if (!reset_n) begin
            phase <= IDLE; core_start <= 1'b0; finished <= 1'b0; feed_i <= '0; rd_addr <= '0;
        end else begin
            core_start <= 1'b0;
            finished <= 1'b0;
            case (phase)
                IDLE: if (!go_n) begin
                    phase <= FEED; feed_i <= '0;
                end
                FEED: begin
                    feed_i <= feed_i + 1;
                    if (feed_i + 1 == cfg_dim) begin
                        phase <= RUN; core_start <= 1'b1;
                    end
                end
                RUN: if (core_done && !core_start) begin
                    phase <= COPY; rd_addr <= '0;
                end
                COPY: begin  // address out, data one cycle later
                    rd_addr <= rd_addr + 1;
                    if (rd_addr != 0) ctx_num[4'(rd_addr - 1)] <= rd_data;
                    if (rd_addr == 8'd16) begin
                        phase <= IDLE; finished <= 1'b1;
                    end
                end
            endcase
        end
    end
endmodule
