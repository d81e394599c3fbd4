; Softmax of 16 BF16 logits through the SFU (CVO unit), the sequence pccx's attention uses.
; Input: 16 logits at L2 word 0 (2 words of 8 BF16), e.g. --l2-image examples/pccx/softmax_x.bin@0
; Output: probabilities at L2 word 0x40 (npukit sim ... --dump L2:0x40+2 shows them).
cvo.reduce_max src=0x0 dst=0x10 len=16                 ; e_max <- max(x) (extended profile)
cvo.exp        src=0x0 dst=0x20 len=16 flags=sub_emax  ; e = exp(x - e_max): never overflows
cvo.reduce_sum src=0x20 dst=0x30 len=16                ; S <- sum(e), in float32, serial
cvo.scale      src=0x20 dst=0x40 len=16 flags=recip_scale  ; p = e / S
