; A round trip through L2: host DDR -> L2 -> host DDR.
; Input: 128 bytes at host byte 0x10000000 (--ddr-image examples/pccx/host_data.bin@0x10000000):
;        64 bytes of data, then 64 zero bytes the copy lands in.
; Output: host bytes 0x10000040..0x1000007F equal the first 64 (--dump DDR:0x10000040+64).
memset cache=fmap slot=3 a=4 b=0x100 c=0           ; slot 3: 4 words (64 B) at host 16*(0x100<<16|0)
memcpy from=host to=npu dest=0x200 src=0 aux=0 shape=3   ; host +0    -> L2 words 0x200..0x203
memcpy from=npu to=host dest=0 src=0x200 aux=4 shape=3   ; L2 0x200.. -> host +4 x 16 B = +64
