#!/bin/sh
# Runs inside the QEMU guest as /test.sh: the Alkali document's example command flow driven by nvme-cli
# passthrough (as the reference host application does with ioctls) against `npukit nvme serve
# --accelerators 2` on the host (10.0.2.2). Inputs come from the extra initramfs archive: /alkali/add.o,
# /alkali/add.in (model then input vector), /alkali/cnn.o, /alkali/cnn.in (padded to whole LBAs),
# /alkali/cnn.args (the start command's argument list). Results go to /dev/ttyS1 between "@@BEGIN name"
# / "@@END name rc=N" lines and as "@@VALUE name value"; the host-side test decides pass/fail.
. /test.env
. /report.sh  # block, value, connect_tries
A=/alkali
u32() { od -An -t u4 -j "$2" -N 4 "$1" | tr -d ' '; }          # u32 at byte offset $2 of file $1
hex() { od -An -t x1 -v "$1" | tr -d ' \n'; }
# admin_read NAME OUTFILE LEN ARGS...: a controller-to-host admin command, raw data into OUTFILE
# (plain sh: every variable is global, so helpers and flow use distinct names)
admin_read() {
    name=$1; dest=$2; len=$3; shift 3
    nvme admin-passthru /dev/nvme0 -r -b -l "$len" "$@" > /tmp/raw 2> /tmp/err
    rc=$?
    tail -c "$len" /tmp/raw > "$dest"
    echo "$name rc=$rc $(cat /tmp/err | tr '\n' ' ')" >> /tmp/steps
    return $rc
}
io_read() {
    name=$1; dest=$2; len=$3; shift 3
    nvme io-passthru /dev/nvme0n1 -n 1 -r -b -l "$len" "$@" > /tmp/raw 2> /tmp/err
    rc=$?
    tail -c "$len" /tmp/raw > "$dest"
    echo "$name rc=$rc $(cat /tmp/err | tr '\n' ' ')" >> /tmp/steps
    return $rc
}
step() { name=$1; shift; "$@" > /tmp/err 2>&1; echo "$name rc=$? $(cat /tmp/err | tr '\n' ' ')" >> /tmp/steps; }

# run ACCEL FWID FIRMWARE [DATAFILE]: steps 3..8 of the flow (data by Send Data unless DATAFILE is empty)
flow() {
    acc=$1; fw=$2; image=$3; data=$4; args=$5
    fwlen=$(wc -c < "$image")
    step send_fw nvme io-passthru /dev/nvme0n1 -n 1 -o 0x85 -w -i "$image" -l "$fwlen" \
        --cdw10=$((fwlen / 4)) --cdw12="$acc" --cdw13="$fw"
    if [ -n "$data" ]; then
        dlen=$(wc -c < "$data")
        step send_data nvme io-passthru /dev/nvme0n1 -n 1 -o 0x81 -w -i "$data" -l "$dlen" \
            --cdw10=$((dlen / 4)) --cdw12="$acc"
    fi
    if [ -n "$args" ]; then
        alen=$(wc -c < "$args")
        step start nvme io-passthru /dev/nvme0n1 -n 1 -o 0x91 -w -i "$args" -l "$alen" \
            --cdw10=$((alen / 4)) --cdw12="$acc" --cdw13=1 --cdw14="$fw"
    else
        step start nvme io-passthru /dev/nvme0n1 -n 1 -o 0x91 --cdw12="$acc" --cdw13=1 --cdw14="$fw"
    fi
    # 6: status, 4 bytes with RAE=1 (the length), then the whole structure with RAE=0, until done/fail
    i=0; sid=1
    while [ $i -lt 600 ]; do
        admin_read status_head /tmp/sh 4 -o 0xc6 --cdw10=1 --cdw12=$((0x80000000 | acc))
        slen=$(u32 /tmp/sh 0)
        admin_read status /tmp/st "$slen" -o 0xc6 --cdw10=$((slen / 4)) --cdw12="$acc"
        sid=$(u32 /tmp/st 4)
        [ "$sid" = 2 ] || [ "$sid" = 3 ] && break
        i=$((i + 1)); sleep 0.2
    done
    value "status_$acc" "$sid"
    value "status_polls_$acc" "$((i + 1))"
    produced=0; off=32
    while [ $off -lt "$slen" ]; do      # the output buffer's status descriptor: bytes produced
        [ "$(u32 /tmp/st $off)" = 2 ] && produced=$(u32 /tmp/st $((off + 8)))
        off=$((off + 32))
    done
    value "output_bytes_$acc" "$produced"
    # 7: log page C0h for this accelerator (LSI), 4 bytes with RAE=1, then its length with RAE=0
    admin_read log_head /tmp/lh 4 -o 0x02 --cdw10=$((0xc0 | 0x8000)) --cdw11=$((acc << 16))
    llen=$(u32 /tmp/lh 0)
    admin_read log /tmp/log "$llen" -o 0x02 --cdw10=$((0xc0 | ((llen / 4 - 1) << 16))) --cdw11=$((acc << 16))
    value "log_$acc" "$(hex /tmp/log)"
    # 8: read the output buffer
    pad=$(( (produced + 3) / 4 * 4 ))
    io_read read_data /tmp/o "$pad" -o 0x82 --cdw10=$((pad / 4)) --cdw12="$acc"
    head -c "$produced" /tmp/o > /tmp/output
    value "output_$acc" "$(hex /tmp/output)"
}

: > /tmp/steps
block connect connect_tries 3 -t tcp -a $HOST -s $PORT -n $NQN -q $HOSTNQN -I $HOSTID
i=0
while [ ! -b /dev/nvme0n1 ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
# 1: Accelerator Identify with 8 bytes (magic, length), then with the length
admin_read identify_head /tmp/ih 8 -o 0xc2 --cdw10=2
value magic "$(head -c 4 /tmp/ih | od -An -t x1 | tr -d ' \n')"
ilen=$(u32 /tmp/ih 4)
admin_read identify /tmp/id "$ilen" -o 0xc2 --cdw10=$((ilen / 4))
value identify "$(hex /tmp/id)"
# 2: enable the accelerator subsystem
step enable nvme admin-passthru /dev/nvme0 -o 0xc0 --cdw12=0
# 3-8 on accelerator 0: the ADD example by Send Data
flow 0 0 $A/add.o $A/add.in ""
# 3-8 on accelerator 1: the CNN from local storage: NVM Write of the blocks, then 0x88 (512-byte LBAs,
# NLB 0-based) with the accelerator in CDW15, and the argument list for the firmware
cnnlen=$(wc -c < $A/cnn.in)
block dd_cnn dd if=$A/cnn.in of=/dev/nvme0n1 bs=512 seek=$SLBA oflag=direct
step storage_input nvme io-passthru /dev/nvme0n1 -n 1 -o 0x88 --cdw12=$SLBA --cdw13=0 \
    --cdw14=$((cnnlen / 512 - 1)) --cdw15=1
flow 1 1 $A/cnn.o "" $A/cnn.args
block steps cat /tmp/steps
block disconnect nvme disconnect -n $NQN
value done 1
