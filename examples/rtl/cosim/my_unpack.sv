// A user's own base-3 decoder, as docs/cosim.md's worked example: a two-stage pipeline behind
// valid/ready streams (AXI-Stream style names), an active-high synchronous reset, and the five
// codes of a byte packed into one 16-bit word with three bits per lane (lane 0 lowest).
// Written for npukit's documentation; not part of any target.
module my_unpack (
    input  logic        aclk,
    input  logic        areset,
    input  logic [7:0]  s_tdata,
    input  logic        s_tvalid,
    output logic        s_tready,
    output logic [15:0] m_tdata,
    output logic        m_tvalid,
    input  logic        m_tready
);
    logic [7:0] stage_byte;
    logic       stage_valid;
    // the pipeline moves when its output slot is free or being taken
    wire advance = !m_tvalid || m_tready;
    assign s_tready = advance;

    always_ff @(posedge aclk) begin
        if (areset) begin
            stage_valid <= 1'b0;
            m_tvalid <= 1'b0;
        end else if (advance) begin
            stage_byte <= s_tdata;
            stage_valid <= s_tvalid;
            m_tvalid <= stage_valid;
            m_tdata <= decode(stage_byte);
        end
    end

    function automatic logic [15:0] decode(input logic [7:0] b);
        logic [7:0] rest;
        decode = '0;
        rest = b;
        for (int lane = 0; lane < 5; lane++) begin
            decode[3*lane +: 3] = 3'(rest % 8'd3);
            rest = rest / 8'd3;
        end
    endfunction
endmodule
