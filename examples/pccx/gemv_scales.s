; y = diag(s) . W x : a 16x64 INT4 GEMV with per-row FP32 scales, weights streamed from host DDR.
; Inputs: the weight image at host byte 0x10000000 (--ddr-image examples/pccx/gemv_w.bin@0x10000000),
;         64 BF16 activations at L2 word 0 (--l2-image examples/pccx/gemv_x.bin@0).
; Output: 16 BF16 results at L2 word 0x100 (--dump L2:0x100+2).
memset cache=fmap slot=2 a=16 b=1 c=64        ; fmap-shape slot 2: M=16 rows, N=1, K=64
memset cache=weight slot=1 a=0 b=0x100 c=0    ; weight slot 1: format 0 (INT4) at 16*(0x100<<16|0)
gemv dest=0x100 src=0x0 flags=w_scale size=1 shape=2   ; w_scale: multiply each row by its scale
