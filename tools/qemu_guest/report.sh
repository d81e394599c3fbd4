# Sourced by every guest test script (build_guest.script_archive puts it at /report.sh). The guest
# reports on its second serial port (/dev/ttyS1): a command's output between "@@BEGIN name" and
# "@@END name rc=N" lines, single values as "@@VALUE name value". Nothing here decides pass/fail: the
# host-side test parses the port (tests/devices/nvme/test_linux_guest.py: parse_results).
R=/dev/ttyS1
stty -F $R raw -echo 2>/dev/null

block() {  # block NAME COMMAND...: the command's output and exit status
    name=$1; shift
    echo "@@BEGIN $name" > $R
    "$@" > /tmp/out 2>&1
    rc=$?
    cat /tmp/out > $R
    echo "@@END $name rc=$rc" > $R
}
value() { echo "@@VALUE $1 $2" > $R; }

# connect_tries TRIES ARGS...: `nvme connect ARGS` up to TRIES times, 2 s apart, each failure printed.
# Under TCG on a busy 2-core host the first Connect can time out in the kernel while the target is
# still warming up, and a target being restarted refuses connections for a while.
connect_tries() {
    tries=$1; shift
    for try in $(seq 1 "$tries"); do
        nvme connect "$@" && return 0
        echo "connect attempt $try failed"
        sleep 2
    done
    return 1
}
