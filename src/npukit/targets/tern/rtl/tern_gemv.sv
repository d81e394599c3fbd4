// Packed ternary GEMV, written for npukit from its engine model (npukit.targets.tern.engine):
// y[r] = sum_c W[r][c] * x[c] with W streamed as base-3 bytes (five trits each, every row starting
// on a byte boundary) and int8 activations. One byte -- five sign-select lanes, no multiplier --
// per cycle into a wrapping int32 accumulator; a row takes ceil(cols/5) cycles.
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
    logic [7:0]         wmem [WBYTES];
    logic signed [7:0]  xmem [MAX_COLS + 5];
    logic signed [31:0] ymem [MAX_ROWS];

    always_ff @(posedge clk) begin
        if (w_we) wmem[w_addr] <= w_data;
        if (x_we) xmem[x_addr] <= x_data;
        y_data <= ymem[y_addr];
    end

    logic [15:0] row, byte_i, row_bytes;
    logic [17:0] wbase;
    logic signed [31:0] acc;

    // one byte's five lanes: decode the digit, select +x, -x or 0
    logic signed [31:0] tile;
    always_comb begin
        logic [7:0] rest;
        logic [15:0] col;
        logic signed [31:0] xv;
        rest = wmem[wbase + 18'(byte_i)];
        tile = '0;
        for (int lane = 0; lane < 5; lane++) begin
            col = 16'(byte_i * 5 + lane);
            xv = (col < cols) ? 32'(xmem[col]) : 32'sd0;
            case (rest % 8'd3)
                8'd1: tile = tile + xv;
                8'd2: tile = tile - xv;
                default: ;
            endcase
            rest = rest / 8'd3;
        end
    end

    always_ff @(posedge clk or negedge rst_n) begin
        if (!rst_n) begin
            busy <= 1'b0; done <= 1'b0; cycles <= '0;
            row <= '0; byte_i <= '0; wbase <= '0; acc <= '0; row_bytes <= '0;
        end else if (!busy) begin
            if (start) begin
                busy <= 1'b1; done <= 1'b0; cycles <= '0;
                row <= '0; byte_i <= '0; wbase <= '0; acc <= '0;
                row_bytes <= 16'((32'(cols) + 4) / 5);
            end
        end else begin
            cycles <= cycles + 1;
            if (byte_i + 1 == row_bytes) begin
                ymem[row] <= acc + tile;
                acc <= '0;
                byte_i <= '0;
                wbase <= wbase + 18'(row_bytes);
                row <= row + 1;
                if (row + 1 == rows) begin
                    busy <= 1'b0;
                    done <= 1'b1;
                end
            end else begin
                acc <= acc + tile;
                byte_i <= byte_i + 1;
            end
        end
    end
endmodule
