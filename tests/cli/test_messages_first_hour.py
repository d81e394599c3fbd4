"""Messages that point the right way (issue 31): a wrong input name, a JSON hardware file, a .o that
is not ELF, a server that is not NVMe/TCP, the zoo list."""

from __future__ import annotations

import socket
import threading

import numpy as np

from npukit.cli.main import main


def run(capsys, *argv: str) -> tuple[int, str]:
    rc = main(list(argv))
    return rc, capsys.readouterr().err


def test_wrong_tflite_input_name_is_named(tmp_path, capsys) -> None:
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((1, 8, 8, 1), np.int8))
    rc, err = run(capsys, "tflite", "run", "zoo:digits", "--input", f"imag={x}")
    assert rc == 2 and "no input named 'imag' (inputs: image)" in err


def test_json_hardware_file_says_toml(tmp_path, capsys) -> None:
    bad = tmp_path / "hw.json"
    bad.write_text("{}")
    rc, err = run(capsys, "hw", str(bad))
    assert rc == 2 and "hardware descriptions are TOML files (.json is not accepted)" in err


def test_text_named_dot_o_is_not_elf(tmp_path, capsys) -> None:
    fake = tmp_path / "fw.o"
    fake.write_text("mov r0, 1\nexit\n")
    rc, err = run(capsys, "bpf", "disasm", str(fake))
    assert rc == 2 and "not an ELF object" in err


def test_unknown_zoo_model_lists_digits(capsys) -> None:
    rc, err = run(capsys, "tflite", "info", "zoo:nope")
    assert rc == 2 and "digits" in err


def test_a_server_that_is_not_nvme(capsys) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def answer() -> None:
        conn, _ = srv.accept()
        conn.recv(4096)
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n" + b" " * 200)
        conn.close()

    t = threading.Thread(target=answer, daemon=True)
    t.start()
    try:
        rc, err = run(capsys, "nvme", "id-ctrl", "--connect", f"tcp://127.0.0.1:{srv.getsockname()[1]}")
    finally:
        t.join(10)
        srv.close()
    assert rc == 2 and "not an NVMe/TCP target" in err and "PDU length" not in err
