// pccx v002 instruction decoder with its error interrupt, written for npukit from the ISA definition
// (npukit.targets.pccx.isa, docs/isa.md): a 64-bit word, opcode in [63:60]; err = 1 exactly when the
// word is not a valid instruction for the profile (strict = v002, extended = npukit's additions) and
// the hardware limits (L2 words, constant-cache entries, GEMV cores). Combinational.
module pccx_decoder (
    input  logic [63:0] word,
    input  logic        profile_ext,
    input  logic [17:0] l2_words,
    input  logic [6:0]  cc_entries,
    input  logic [4:0]  lanes,
    output logic [3:0]  opcode,
    output logic        err
);
    localparam logic [3:0] GEMV = 4'h0, GEMM = 4'h1, MEMCPY = 4'h2, MEMSET = 4'h3, CVO = 4'h4;
    assign opcode = word[63:60];

    function automatic logic beyond_l2(input logic [16:0] addr, input logic [17:0] limit);
        return 18'(addr) >= limit;
    endfunction
    function automatic logic beyond_cc(input logic [5:0] slot, input logic [6:0] limit);
        return 7'(slot) >= limit;
    endfunction

    // GEMV / GEMM
    logic mat_err;
    always_comb begin
        mat_err = word[2:1] != 2'b0                      // reserved
               || word[22:20] != 3'b0                     // flags[2:0] reserved
               || beyond_l2(word[59:43], l2_words)        // dest_reg
               || beyond_l2(word[42:26], l2_words)        // src_addr
               || beyond_cc(word[19:14], cc_entries)      // size_ptr_addr
               || beyond_cc(word[13:8], cc_entries)       // shape_ptr_addr
               || 5'(word[7:3]) > lanes                   // parallel_lane
               || (word[0] && !profile_ext);              // async: extended only
    end

    // MEMCPY
    logic memcpy_err;
    logic from_host, to_host;
    assign from_host = word[59];
    assign to_host = word[58];
    always_comb begin
        memcpy_err = beyond_l2(word[57:41], l2_words)     // dest_addr
                  || beyond_l2(word[40:24], l2_words)     // src_addr
                  || beyond_cc(word[6:1], cc_entries)     // shape_ptr_addr
                  || (from_host && to_host)
                  || (from_host && word[40:24] != 17'b0)
                  || (to_host && word[57:41] != 17'b0)
                  || (!from_host && !to_host && word[23:7] != 17'b0);
    end

    // MEMSET
    logic memset_err;
    logic [1:0] cache;
    assign cache = word[59:58];
    always_comb begin
        memset_err = word[3:1] != 3'b0                                    // reserved
                  || (word[0] && !profile_ext)                            // async: extended only
                  || cache == 2'd3
                  || (cache == 2'd2 && !profile_ext)                      // SFU registers: extended
                  || (cache != 2'd2 && beyond_cc(word[57:52], cc_entries))
                  || (cache == 2'd2 && (word[57:52] > 6'd1 || word[35:20] != 16'b0
                                        || word[19:4] != 16'b0));
    end

    // CVO
    logic cvo_err;
    logic [3:0]  func;
    logic [15:0] len;
    logic [16:0] src, dst;
    logic [17:0] src_end, dst_end;
    logic [16:0] out_elems;
    assign func = word[59:56];
    assign src = word[55:39];
    assign dst = word[38:22];
    assign len = word[21:6];
    always_comb begin
        case (func)
            4'hF:       out_elems = 17'd0;                 // LOAD_SCALAR writes nothing
            4'h5, 4'hE: out_elems = 17'd1;                 // REDUCE_SUM, REDUCE_MAX
            default:    out_elems = 17'(len);
        endcase
        src_end = 18'(src) + 18'((17'(len) + 17'd7) >> 3);
        dst_end = 18'(dst) + 18'((out_elems + 17'd7) >> 3);
        cvo_err = (func[3] && !profile_ext)                                  // functions 8..F: extended
               || word[2:1] != 2'b0                                          // flags[1:0] reserved
               || len == 16'd0
               || (word[5] && func != 4'h0)                                  // sub_emax: EXP only
               || (word[4] && func != 4'h6)                                  // recip_scale: SCALE only
               || (word[3] && (func == 4'h9 || func == 4'hA || func == 4'hE || func == 4'hF))  // accm
               || beyond_l2(src, l2_words) || beyond_l2(dst, l2_words)
               || src_end > l2_words || dst_end > l2_words;
    end

    always_comb begin
        case (opcode)
            GEMV, GEMM: err = mat_err;
            MEMCPY:     err = memcpy_err;
            MEMSET:     err = memset_err;
            CVO:        err = cvo_err;
            default:    err = 1'b1;                        // opcodes 5..F are not defined
        endcase
    end
endmodule
