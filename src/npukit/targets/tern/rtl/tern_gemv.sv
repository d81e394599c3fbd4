// Packed ternary GEMV, written for npukit from its engine model (npukit.targets.tern.engine):
// y[r] = sum_c W[r][c] * x[c] with W streamed as base-3 bytes (five trits each, every row starting
// on a byte boundary) and int8 activations. K = 8 sign-select lanes (no multiplier) take one tile
// of eight columns per cycle -- its trits come from up to three consecutive bytes -- into a
// wrapping int32 accumulator: a row takes ceil(cols/8) cycles, as the engine model counts tiles.
// Host protocol: write W (w_we) and x (x_we), pulse start, wait for done, read y (1-cycle latency).
module tern_gemv #(
    parameter int MAX_ROWS = 512,
    parameter int MAX_COLS = 512,
    parameter int WBYTES = MAX_ROWS * ((MAX_COLS + 4) / 5)
) (
    input  logic               clk,
    input  logic               rst_n,
    input  logic               start,
    input  logic [15:0]        rows,
    input  logic [15:0]        cols,
    input  logic               w_we,
    input  logic [17:0]        w_addr,
    input  logic [7:0]         w_data,
    input  logic               x_we,
    input  logic [15:0]        x_addr,
    input  logic signed [7:0]  x_data,
    input  logic [15:0]        y_addr,
    output logic signed [31:0] y_data,
    output logic               busy,
    output logic               done,
    output logic [31:0]        cycles
);
    localparam int K = 8;
    logic [7:0]         wmem [WBYTES + 2];
    logic signed [7:0]  xmem [MAX_COLS + K];
    logic signed [31:0] ymem [MAX_ROWS];

    always_ff @(posedge clk) begin
        if (w_we) wmem[w_addr] <= w_data;
        if (x_we) xmem[x_addr] <= x_data;
        y_data <= ymem[y_addr];
    end

    logic [15:0] row, col, row_bytes, tiles, tile;
    logic [17:0] wbyte;     // byte holding this tile's first trit
    logic [2:0]  off;       // that trit's digit within the byte
    logic [17:0] wbase;     // the row's first byte
    logic signed [31:0] acc;

    // one tile: three bytes decoded to fifteen digits, lanes take digits off .. off+7
    logic signed [31:0] tile_sum;
    always_comb begin
        logic [7:0] rest;
        logic [1:0] digit [15];
        for (int b = 0; b < 3; b++) begin
            rest = wmem[wbyte + 18'(b)];
            for (int t = 0; t < 5; t++) begin
                digit[5 * b + t] = 2'(rest % 8'd3);
                rest = rest / 8'd3;
            end
        end
        tile_sum = '0;
        for (int lane = 0; lane < K; lane++) begin
            if (col + 16'(lane) < cols) begin
                case (digit[32'(off) + lane])
                    2'd1: tile_sum = tile_sum + 32'(xmem[col + 16'(lane)]);
                    2'd2: tile_sum = tile_sum - 32'(xmem[col + 16'(lane)]);
                    default: ;
                endcase
            end
        end
    end

    always_ff @(posedge clk or negedge rst_n) begin
        if (!rst_n) begin
            busy <= 1'b0; done <= 1'b0; cycles <= '0;
            row <= '0; col <= '0; tile <= '0; wbyte <= '0; off <= '0; wbase <= '0; acc <= '0;
            row_bytes <= '0; tiles <= '0;
        end else if (!busy) begin
            if (start) begin
                busy <= 1'b1; done <= 1'b0; cycles <= '0;
                row <= '0; col <= '0; tile <= '0; wbyte <= '0; off <= '0; wbase <= '0; acc <= '0;
                row_bytes <= 16'((32'(cols) + 4) / 5);
                tiles <= 16'((32'(cols) + K - 1) / K);
            end
        end else begin
            cycles <= cycles + 1;
            if (tile + 1 == tiles) begin  // the row's last tile: store, move to the next row
                ymem[row] <= acc + tile_sum;
                acc <= '0;
                tile <= '0;
                col <= '0;
                off <= '0;
                wbase <= wbase + 18'(row_bytes);
                wbyte <= wbase + 18'(row_bytes);
                row <= row + 1;
                if (row + 1 == rows) begin
                    busy <= 1'b0;
                    done <= 1'b1;
                end
            end else begin                // eight columns on: one byte and three digits
                acc <= acc + tile_sum;
                tile <= tile + 1;
                col <= col + 16'(K);
                if (off + 3'd3 >= 3'd5) begin
                    wbyte <= wbyte + 18'd2;
                    off <= off - 3'd2;
                end else begin
                    wbyte <= wbyte + 18'd1;
                    off <= off + 3'd3;
                end
            end
        end
    end
endmodule
