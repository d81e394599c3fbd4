#!/bin/sh
# Runs inside the QEMU guest as /test.sh: the Linux kernel's NVMe/TCP host and nvme-cli against an
# `npukit nvme serve` target on the host (10.0.2.2). Settings come from /test.env; every result goes
# to the second serial port (/dev/ttyS1) between "@@BEGIN name" / "@@END name" lines, which the test
# on the host parses. Nothing here decides pass/fail: the host-side test does.
. /test.env
. /report.sh  # block, value, connect_tries

ID="-q $HOSTNQN -I $HOSTID"
block discover nvme discover -t tcp -a $HOST -s $DISC_PORT $ID -o json
block connect connect_tries 3 -t tcp -a $HOST -s $PORT -n $NQN $ID -g -G
i=0
while [ ! -b /dev/nvme0n1 ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
value size_sectors "$(cat /sys/block/nvme0n1/size 2>/dev/null || echo missing)"
block smart_before nvme smart-log /dev/nvme0 -o json

# 1 MiB at byte 1 MiB in 64 KiB direct writes (beyond in-capsule size: R2T/H2CData), then 128 KiB at
# byte 3 MiB in 4 KiB direct writes (in-capsule data)
dd if=/dev/urandom of=/tmp/pattern bs=65536 count=16 2>/dev/null
value pattern_sha256 "$(sha256sum /tmp/pattern | cut -d' ' -f1)"
value head_sha256 "$(head -c 131072 /tmp/pattern | sha256sum | cut -d' ' -f1)"
block dd_write_64k dd if=/tmp/pattern of=/dev/nvme0n1 bs=65536 count=16 seek=16 oflag=direct
block dd_write_4k dd if=/tmp/pattern of=/dev/nvme0n1 bs=4096 count=32 seek=768 oflag=direct
value readback_sha256 "$(dd if=/dev/nvme0n1 bs=65536 count=16 skip=16 iflag=direct 2>/dev/null | sha256sum | cut -d' ' -f1)"
value readback_head_sha256 "$(dd if=/dev/nvme0n1 bs=4096 count=32 skip=768 iflag=direct 2>/dev/null | sha256sum | cut -d' ' -f1)"
block flush nvme flush /dev/nvme0n1

block id_ctrl nvme id-ctrl /dev/nvme0 -o json
block id_ns nvme id-ns /dev/nvme0n1 -o json
# --csi=0: nvme-cli 2.3 (Debian 12) reads the effects log without it only on PCIe controllers and
# prints nothing on fabrics (linux-nvme/nvme-cli#1783, fixed after 2.3)
block effects_log nvme effects-log /dev/nvme0 --csi=0
block smart_after nvme smart-log /dev/nvme0 -o json
# a vendor opcode no handler claims (0xC2 is the Alkali Accelerator Identify when accelerators are served)
block vendor_passthru nvme admin-passthru /dev/nvme0 -o 0xca -l 16 -r -4 4
# a whole number of 4 KiB transfers: nvme-cli pads a short last transfer with uninitialised memory
dd if=/dev/urandom of=/tmp/fw.bin bs=4096 count=3 2>/dev/null
value fw_sha256 "$(sha256sum /tmp/fw.bin | cut -d' ' -f1)"
block fw_download nvme fw-download /dev/nvme0 --fw=/tmp/fw.bin
block fw_commit nvme fw-commit /dev/nvme0 --slot=2 --action=1
block fw_log nvme fw-log /dev/nvme0 -o json
block disconnect nvme disconnect -n $NQN

# again with SQ flow control disabled (Connect CATTR bit 2): the target then ends successful Reads with
# C2HData's SUCCESS flag instead of a CapsuleResp; the blocks written above must read back the same
block connect_sqflow connect_tries 3 -t tcp -a $HOST -s $PORT -n $NQN $ID --disable-sqflow
i=0
dev=""
while [ -z "$dev" ] && [ $i -lt 200 ]; do
    dev=$(ls /dev/nvme*n1 2>/dev/null | head -n 1); [ -n "$dev" ] || sleep 0.1; i=$((i + 1))
done
value sqflow_readback_sha256 "$(dd if=$dev bs=65536 count=16 skip=16 iflag=direct 2>/dev/null | sha256sum | cut -d' ' -f1)"
value sqflow_head_sha256 "$(dd if=$dev bs=4096 count=32 skip=768 iflag=direct 2>/dev/null | sha256sum | cut -d' ' -f1)"
block disconnect_sqflow nvme disconnect -n $NQN
value done 1
