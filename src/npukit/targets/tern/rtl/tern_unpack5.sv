// Base-3 weight decoder of the ternary engine, written for npukit from its definition
// (npukit.targets.tern.engine.decode_base3): five trits per byte, lane 0 the least significant
// digit; digit 0 -> code 2'b00 (0), 1 -> 2'b01 (+1), 2 -> 2'b10 (-1). Every byte value is decoded
// by the same digit arithmetic, so 243..255 alias onto the codes of their low five digits.
// Purely combinational.
module tern_unpack5 (
    input  logic [7:0] byte_in,
    output logic [9:0] codes      // lane k in bits [2k+1:2k]
);
    always_comb begin
        logic [7:0] rest;
        rest = byte_in;
        for (int lane = 0; lane < 5; lane++) begin
            codes[2*lane +: 2] = 2'(rest % 8'd3);
            rest = rest / 8'd3;
        end
    end
endmodule
