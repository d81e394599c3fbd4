#!/bin/sh
# Runs inside the QEMU guest as /test.sh (tests/devices/nvme/test_fio_guest.py): fio with data
# verification through the kernel's nvme-tcp against `npukit nvme serve`, across a kill -9 of the target.
#   1. mixed: 4 jobs x QD 16, random read/write of 4 KiB..1 MiB blocks, crc32c verification while it
#      runs (verify_backlog) and at the end, $RUNTIME s (time based)
#   2. fill: every block of the 4 job regions written once with crc32c headers, state saved
#   3. the device's SHA-256, disconnect; the host kills the target with SIGKILL and restarts it
#   4. reconnect, the same SHA-256, and a verify-only pass of the fill from the saved state
# Results go to /dev/ttyS1 between "@@BEGIN name" / "@@END name rc=N" lines; the host test decides.
. /test.env
. /report.sh  # block, value, connect_tries
wait_dev() { for i in $(seq 1 50); do [ -b /dev/nvme0n1 ] && return 0; sleep 0.2; done; return 1; }

cd /tmp
TARGET="-t tcp -a $HOST -s $PORT -n $NQN -q $HOSTNQN -I $HOSTID"
block connect connect_tries 5 $TARGET
wait_dev
JOB="--filename=/dev/nvme0n1 --ioengine=libaio --direct=1 --iodepth=16 --numjobs=4 --size=$REGION
     --offset_increment=$REGION --bsrange=4k-1m --verify=crc32c --verify_fatal=1 --group_reporting
     --output-format=json"
block mixed fio --name=mixed $JOB --rw=randrw --time_based --runtime=$RUNTIME --verify_backlog=64
block fill fio --name=fill $JOB --rw=randwrite --do_verify=0 --verify_state_save=1
value sha_before "$(dd if=/dev/nvme0n1 bs=1M iflag=direct 2>/dev/null | sha256sum | cut -d' ' -f1)"
block disconnect nvme disconnect -n $NQN
value waiting_for_restart 1
block reconnect connect_tries 60 $TARGET
wait_dev
value sha_after "$(dd if=/dev/nvme0n1 bs=1M iflag=direct 2>/dev/null | sha256sum | cut -d' ' -f1)"
block verify fio --name=fill $JOB --rw=randwrite --verify_only --verify_state_load=1
block disconnect_end nvme disconnect -n $NQN
value done 1
