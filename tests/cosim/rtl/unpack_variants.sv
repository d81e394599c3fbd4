// Test fixtures: the base-3 decode behind interfaces the shipped designs do not use, for the port
// map paths they leave out.

// A two-stage pipeline, one byte a cycle, codes on an unpacked array port; works only while `mode`
// (a tie-off) is 3.
module unpack_piped (
    input  logic       clk,
    input  logic [1:0] mode,
    input  logic [7:0] din,
    output logic [1:0] lane [5]
);
    logic [7:0] held;
    always_ff @(posedge clk) begin
        held <= din;
        for (int k = 0; k < 5; k++) lane[k] <= mode == 2'd3 ? 2'((held / (8'd3 ** k)) % 8'd3) : 2'd0;
    end
endmodule

// Bytes through a write port, codes through a read port with enable and two cycles of latency,
// an active-low start, `busy` instead of done, and `stuck` that never rises.
module unpack_mem (
    input  logic        clk,
    input  logic        rst,
    input  logic        go_n,
    input  logic [11:0] count,
    input  logic        b_wr,
    input  logic [11:0] b_at,
    input  logic [7:0]  b_val,
    input  logic        c_rd,
    input  logic [11:0] c_at,
    output logic [9:0]  c_val,
    output logic        busy,
    output logic        stuck
);
    logic [7:0] bytes_mem [4096];
    logic [9:0] codes_mem [4096];
    logic [11:0] i;
    logic [9:0] c_q;
    assign stuck = 1'b0;
    always_ff @(posedge clk) begin
        if (b_wr) bytes_mem[b_at] <= b_val;
        if (c_rd) c_q <= codes_mem[c_at];
        c_val <= c_q;
    end
    always_ff @(posedge clk) begin
        if (rst) begin
            busy <= 1'b0; i <= '0;
        end else if (!busy) begin
            if (!go_n) begin
                busy <= 1'b1; i <= '0;
            end
        end else begin
            for (int k = 0; k < 5; k++) codes_mem[i][2*k +: 2] <= 2'((bytes_mem[i] / (8'd3 ** k)) % 8'd3);
            i <= i + 1;
            if (i + 1 == count) busy <= 1'b0;
        end
    end
endmodule

// The bytes on an unpacked array input port, a start pulse and a done level; codes read back with
// one cycle of latency.
module unpack_array (
    input  logic        clk,
    input  logic        start,
    input  logic [11:0] count,
    input  logic [7:0]  bytes_in [2048],
    input  logic [11:0] c_at,
    output logic [9:0]  c_val,
    output logic        done
);
    logic [9:0]  codes_mem [2048];
    logic [11:0] i;
    logic        running = 1'b0;
    always_ff @(posedge clk) begin
        c_val <= codes_mem[c_at[10:0]];
        if (start) begin
            running <= 1'b1; done <= 1'b0; i <= '0;
        end else if (running) begin
            for (int k = 0; k < 5; k++)
                codes_mem[i[10:0]][2*k +: 2] <= 2'((bytes_in[i[10:0]] / (8'd3 ** k)) % 8'd3);
            i <= i + 1;
            if (i + 1 == count) begin
                running <= 1'b0; done <= 1'b1;
            end
        end
    end
endmodule
