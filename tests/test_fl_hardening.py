"""Hardening of `otter fl serve` against hostile clients (issue 18), on loopback with the tiny Gemm model of
test_fl_faults.py and its independent protocol speaker:

A. FedAvgM poisoned with huge finite values and 2^62 examples: the overflowing round's updates are dropped
   with a log line, the server keeps serving, the saved momentum stays within float range, and an honest
   update then completes the run (exit 0).
B. Authorization per RFC 7235/6750: the scheme in any case is accepted; a token with a tail after a space,
   other schemes and an empty token are refused (401); so is a token with a NUL and a tail ("Bearer good\\0x",
   which libmicrohttpd 0.9.75 hands over as "Bearer good") or trailing NULs, with the header in the middle
   of the request or last (raw bytes over a socket).
C. FedAvg with --clip-norm 1 --max-examples 100: a client sending 1e30 and claiming 2^62 examples is weighted
   as 100 (logged) and its change scaled to norm 1 (logged); the new global model is exactly the clipped,
   capped weighted mean (computed here in float64).
D. Tokens: a --tokens line (here a # comment) longer than 1024 characters is refused naming the file and
   the line (before, its tail became a token); a token with a space is refused at start; a server taking its
   token from OTTER_FL_TOKEN and a real `otter fl client` reading it with --token-file complete a round.
E. Connections: 300 idle connections from 127.0.0.2 (--max-connections 300, --max-connections-per-ip 50)
   don't lock out a real client on 127.0.0.1, which completes a round; --idle-timeout closes the idle ones;
   a body trickled one byte at a time is cut off at --request-timeout (libmicrohttpd's own timeout restarts
   with every byte); a client's --give-up 2 is honoured against a server that accepts and never answers.
H. Slow headers (slowloris): 60 connections from 127.0.0.2 sending one header byte a second
   (--max-connections-per-ip 20, --request-timeout 3, --idle-timeout 30): the 20 held are cut at the
   deadline (logged), not at the idle timeout that each byte restarts, while a real client registers and
   polls; a second client then joins and the round completes.
F. Registration slots: --max-clients-per-token 3 refuses a 4th registration with one token (503) but not
   with another; --slot-ttl 1.5 expires silent registrations, so the token registers again, and the expired
   client's token no longer works (401).
G. TLS: with a self-signed certificate for 127.0.0.1 made here (openssl), `fl serve --tls-cert --tls-key`
   and `fl client --ca` complete a round over https; a client without --ca refuses the certificate.
"""
import shutil
import threading
import time
import subprocess
import os
import re
import socket
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as tl  # noqa: E402
from testlib import check  # noqa: E402
import test_fl_faults as ff  # noqa: E402

ff.WORK = tl.work_dir("fl_hardening")
w, serve, finish, text, Proto, msg, N = ff.w, ff.serve, ff.finish, ff.text, ff.Proto, ff.msg, ff.N


def state_momentum(path):
    """The FedAvgM velocity saved in fl_state.bin (format of src/fl/aggregate.c, read independently)."""
    b = open(path, "rb").read()
    at = 8 + 4 + 4 + 56 + 8  # magic, version, kind, 7 hyperparameters, round
    (np_,) = struct.unpack_from("<Q", b, at)
    at += 8
    for _ in range(np_):
        (ln,) = struct.unpack_from("<I", b, at)
        at += 4 + ln + 4
        (rank,) = struct.unpack_from("<I", b, at)
        at += 4 + 8 * rank
    (n,) = struct.unpack_from("<Q", b, at)
    at += 8 + 4 * n
    (ns,) = struct.unpack_from("<I", b, at)
    at += 4
    return np.frombuffer(b, "<f8", n, at) if ns else np.zeros(0)


def test_poisoned_fedavgm():
    print("== A: FedAvgM with 3e38 values and 2^62 examples", flush=True)
    srv, port = serve("a_srv", "a_state", "--strategy", "fedavgm", rounds=2, k=1, timeout=30)
    c = Proto(port)
    st, _ = c.register()
    check(st == 200 and c.wait_train(1), f"registered and picked for round 1 ({st})")
    huge = np.full(N, 3e38, np.float32)
    st, body = c.req("POST", "/update", msg(2, 1, 1 << 62, huge))
    check(st == 200, f"round 1 update of 3e38 x 2^62 examples accepted as well-formed: {st}")
    # round 1's velocity is 3e38 - w0 (in float range); round 2's same update gives x + 0.9 * 3e38: overflow
    check(c.wait_train(2), "round 2 open")
    st, _ = c.req("POST", "/update", msg(2, 2, 1 << 62, huge))
    check(st == 200, f"round 2 poisoned update: {st}")
    dropped = ff.wait_for("a_srv", r"round 2: the aggregate .* not finite.*updates are dropped", 15, "err", srv)
    check(dropped is not None, "the overflowing round is dropped with a log line: " +
          (dropped.group(0) if dropped else text("a_srv", "err")[-400:]))
    check(srv.poll() is None, "the server keeps serving")
    check(c.wait_train(2), "round 2 opens again")
    m = state_momentum(w("a_state", "fl_state.bin"))
    check(m.size == N and bool(np.all(np.abs(m) <= np.finfo(np.float32).max)),
          f"saved momentum within float range (max |m| {np.max(np.abs(m)):.3g})")
    st, _ = c.req("POST", "/update", msg(2, 2, 10, -huge))
    check(st == 200, f"an update pulling back: {st}")
    rc = finish(srv, 30)
    check(rc == 0, f"server exit {rc}: {text('a_srv', 'err')[-300:]}")
    check(re.search(r"round 2/2: clients 1/1", text("a_srv")) is not None, "round 2 completes")


def test_clip_and_cap():
    print("== C: --clip-norm and --max-examples", flush=True)
    srv, port = serve("c_srv", "c_state", "--clip-norm", "1", "--max-examples", "100", rounds=2, k=2, timeout=30)
    cs = [Proto(port) for _ in range(2)]
    for c in cs:
        st, _ = c.register()
        check(st == 200, f"registration: {st}")
    check(all(c.wait_train(1) for c in cs), "both picked for round 1")
    st, body = cs[0].req("GET", "/params")
    g0 = ff.decode_params(body, 1).astype(np.float64)
    honest = (g0 + 0.01).astype(np.float32)
    huge = np.full(N, 1e30, np.float32)
    st0, _ = cs[0].req("POST", "/update", msg(2, 1, 10, honest))
    st1, _ = cs[1].req("POST", "/update", msg(2, 1, 1 << 62, huge))
    check(st0 == 200 and st1 == 200, f"both updates accepted ({st0}, {st1})")
    check(all(c.wait_train(2) for c in cs), "round 2 open")
    st, body = cs[0].req("GET", "/params")
    g1 = ff.decode_params(body, 2).astype(np.float64)
    da, db = honest.astype(np.float64) - g0, huge.astype(np.float64) - g0
    want = g0 + (10 * da * min(1, 1 / np.linalg.norm(da)) + 100 * db / np.linalg.norm(db)) / 110
    diff = float(np.max(np.abs(g1 - want)))
    check(diff < 1e-6, f"global == clipped mean weighted 10:100 (max diff {diff:.3g}, moved by "
          f"{np.linalg.norm(g1 - g0):.4f})")
    err = text("c_srv", "err")
    check(re.search(r"claims 4611686018427387904 examples, weighted as 100 \(--max-examples\)", err) is not None,
          "the capped claim is logged")
    check("round 1: 1 of 2 updates clipped to norm 1" in err, "the clipping is logged")
    srv.kill()
    srv.wait()


def test_tokens():
    print("== D: token files and OTTER_FL_TOKEN", flush=True)
    with open(w("tokens.txt"), "w") as f:
        f.write("good\n# " + "x" * 2000 + "\nother\n")
    args = ["fl", "serve", "--artifacts", w("art"), "--rounds", "1", "--clients-per-round", "1", "--listen",
            "127.0.0.1:0", "--state", w("d_state"), "--round-timeout", "30", "--poll-ms", "50"]
    r = subprocess.run([tl.CLI, *args, "--tokens", w("tokens.txt")], capture_output=True, text=True, timeout=30)
    check(r.returncode != 0 and "tokens.txt' line 2: longer than 1024 characters" in r.stderr,
          f"a 2002-character line refused: exit {r.returncode}: {r.stderr.strip()[-200:]}")
    r = subprocess.run([tl.CLI, *args, "--token", "two words"], capture_output=True, text=True, timeout=30)
    check(r.returncode != 0 and "characters a Bearer token can't carry" in r.stderr,
          f"a token with a space refused: {r.stderr.strip()[-160:]}")
    env = dict(os.environ, OTTER_FL_TOKEN="from-env.42")
    out, err = open(w("d_srv.out"), "w"), open(w("d_srv.err"), "w")
    srv = subprocess.Popen([tl.CLI, *args], stdout=out, stderr=err, env=env)
    ff.procs.append(srv)
    mt = ff.wait_for("d_srv", r"listening on http://127\.0\.0\.1:(\d+)", 20, proc=srv)
    check(mt is not None, "server with its token from OTTER_FL_TOKEN listening")
    if not mt:
        return
    with open(w("client.token"), "w") as f:
        f.write("# the token\nfrom-env.42\n")
    cl = ff.spawn(["fl", "client", "--server", f"http://127.0.0.1:{mt.group(1)}", "--token-file", w("client.token"),
                   "--artifacts", w("art"), "--data", f"npy:{w('x.npy')},{w('y.npy')}", "--threads", "1",
                   "--give-up", "30"], "d_cl")
    rc_c, rc_s = finish(cl, 60), finish(srv, 60)
    check(rc_c == 0 and rc_s == 0 and "round 1/1: clients 1/1" in text("d_srv"),
          f"a round with file and environment tokens: client {rc_c}, server {rc_s}")


def client_args(port):
    return ["fl", "client", "--server", f"http://127.0.0.1:{port}", "--token", "good", "--artifacts", w("art"),
            "--data", f"npy:{w('x.npy')},{w('y.npy')}", "--threads", "1"]


def test_connections():
    print("== E: idle connections, trickled bodies, --give-up", flush=True)
    srv, port = serve("e_srv", "e_state", "--max-connections", "300", "--max-connections-per-ip", "50",
                      "--idle-timeout", "4", "--request-timeout", "2", rounds=1, k=1, timeout=30)
    idle = []
    for _ in range(300):
        s = socket.socket()
        s.bind(("127.0.0.2", 0))
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            s.close()
            continue
        idle.append(s)
    t0 = time.time()
    cl = ff.spawn([*client_args(port), "--give-up", "30"], "e_cl")
    rc = finish(cl, 60)
    # the client may exit with the round's model a moment before the server logs the round
    logged = ff.wait_for("e_srv", r"round 1/1: clients 1/1", 10, proc=srv) is not None
    check(rc == 0 and logged,
          f"a real client completes a round past {len(idle)} idle connections: exit {rc} in {time.time() - t0:.1f}s")
    # the idle ones are closed: the 250 over the per-address cap at once, the rest after --idle-timeout
    closed = 0
    for s in idle:
        s.settimeout(8)
        try:
            closed += s.recv(1) == b""
        except ConnectionResetError:
            closed += 1
        except socket.timeout:
            pass
        s.close()
    check(closed == len(idle), f"idle connections closed: {closed} of {len(idle)}")
    finish(srv, 30)

    srv, port = serve("e2_srv", "e2_state", "--request-timeout", "2", rounds=1, k=1, timeout=30)
    s = socket.create_connection(("127.0.0.1", port), timeout=15)
    s.sendall(b"POST /register HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good\r\nContent-Length: 1000\r\n\r\n")
    t0, cut = time.time(), None
    try:
        while time.time() - t0 < 15:
            s.sendall(b"x")
            time.sleep(0.25)
    except OSError:
        cut = time.time() - t0
    s.close()
    check(cut is not None and cut < 6, f"a trickled body cut off after {cut if cut is None else round(cut, 1)}s (--request-timeout 2)")
    check("no complete request within 2s" in text("e2_srv", "err"), "and logged")
    srv.kill()
    srv.wait()

    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(16)
    held = []
    stop = threading.Event()

    def accept_all():
        mute.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(mute.accept()[0])
            except socket.timeout:
                pass
    th = threading.Thread(target=accept_all)
    th.start()
    t0 = time.time()
    cl = ff.spawn([*client_args(mute.getsockname()[1]), "--give-up", "2"], "e3_cl")
    rc = finish(cl, 30)
    took = time.time() - t0
    stop.set()
    th.join()
    for c in held:
        c.close()
    mute.close()
    check(rc not in (0, None) and took < 10, f"--give-up 2 against a mute server: exit {rc} after {took:.1f}s")


def test_slow_headers():
    print("== H: headers trickled one byte a second", flush=True)
    srv, port = serve("h_srv", "h_state", "--max-connections-per-ip", "20", "--idle-timeout", "30",
                      "--request-timeout", "3", rounds=1, k=2, timeout=60)
    slow, cut = [], {}
    for _ in range(60):
        s = socket.socket()
        s.bind(("127.0.0.2", 0))
        s.connect(("127.0.0.1", port))
        s.setblocking(False)
        slow.append(s)
    head = b"GET /round HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100
    first = ff.spawn([*client_args(port), "--give-up", "60"], "h_cl1")
    t0 = time.time()
    for i in range(len(head)):
        if len(cut) == len(slow) or time.time() - t0 > 12:
            break
        for k, s in enumerate(slow):
            if k in cut:
                continue
            try:
                s.send(head[i:i + 1])
                if s.recv(1) == b"":
                    cut[k] = time.time() - t0
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                cut[k] = time.time() - t0
        time.sleep(1)
    for s in slow:
        s.close()
    held = sorted(t for t in cut.values() if t >= 1.5)
    check(len(cut) == len(slow) and 15 <= len(held) <= 20 and held[-1] < 8,
          f"{len(cut)} of {len(slow)} slow connections cut: {len(cut) - len(held)} at once (per-address cap), "
          f"{len(held)} after {held[0] if held else 0:.1f}..{held[-1] if held else 0:.1f}s (--request-timeout 3)")
    second = ff.spawn([*client_args(port), "--give-up", "60"], "h_cl2")
    rc1, rc2 = finish(first, 60), finish(second, 60)
    # Read the server's log only once it has exited: until then its last lines may not be written yet (a
    # client may exit with the round's model before the server logs the round).
    finish(srv, 30)
    check(rc1 == 0 and rc2 == 0 and "round 1/1: clients 2/2" in text("h_srv"),
          f"the client polling meanwhile and a second one complete the round: exit {rc1}, {rc2}")
    logged = len(re.findall(r"closed the connection from 127\.0\.0\.2:\d+: no complete request within 3s",
                            text("h_srv", "err")))
    check(logged >= len(held), f"{logged} cuts logged")


def test_slots():
    print("== F: registration slots per token, expiring", flush=True)
    with open(w("two_tokens.txt"), "w") as f:
        f.write("good\nother\n")
    srv = ff.spawn(["fl", "serve", "--artifacts", w("art"), "--rounds", "1", "--clients-per-round", "50", "--listen",
                    "127.0.0.1:0", "--state", w("f_state"), "--tokens", w("two_tokens.txt"), "--poll-ms", "50",
                    "--max-clients-per-token", "3", "--slot-ttl", "1.5"], "f_srv")
    mt = ff.wait_for("f_srv", r"listening on http://127\.0\.0\.1:(\d+)", 20, proc=srv)
    check(mt is not None, "server with --max-clients-per-token 3 --slot-ttl 1.5 listening")
    if not mt:
        return
    port = int(mt.group(1))
    first = [Proto(port) for _ in range(3)]
    check([c.register()[0] for c in first] == [200] * 3, "3 registrations with one token")
    st, body = Proto(port).register()
    check(st == 503, f"a 4th with the same token: {st} {body.strip().decode()}")
    st, _ = Proto(port).register(token="other")
    check(st == 200, f"one with another token: {st}")
    time.sleep(2.5)
    st, _ = Proto(port).register()
    check(st == 200, f"after --slot-ttl, the token registers again: {st}")
    st, _ = first[0].req("GET", "/round")
    check(st == 401, f"an expired registration's token is refused: {st}")
    check("holds 3 registrations" in text("f_srv", "err"), "the refusal is logged")
    srv.kill()
    srv.wait()


def test_tls():
    print("== G: TLS on loopback", flush=True)
    if not shutil.which("openssl"):
        check(False, "openssl (tools/setup.sh installs it) to make the test certificate")
        return
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                        "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", w("key.pem"), "-out",
                        w("cert.pem")], capture_output=True, text=True)
    check(r.returncode == 0, "self-signed certificate" + ("" if r.returncode == 0 else ": " + r.stderr[-200:]))
    srv = ff.spawn(["fl", "serve", "--artifacts", w("art"), "--rounds", "1", "--clients-per-round", "1", "--listen",
                    "127.0.0.1:0", "--state", w("g_state"), "--token", "good", "--poll-ms", "50", "--tls-cert",
                    w("cert.pem"), "--tls-key", w("key.pem")], "g_srv")
    mt = ff.wait_for("g_srv", r"listening on https://127\.0\.0\.1:(\d+)", 20, proc=srv)
    check(mt is not None, "server listening on https: " + text("g_srv", "err")[-200:])
    if not mt:
        return
    url = f"https://127.0.0.1:{mt.group(1)}"
    base = ["fl", "client", "--server", url, "--token", "good", "--artifacts", w("art"), "--data",
            f"npy:{w('x.npy')},{w('y.npy')}", "--threads", "1"]
    bad = ff.spawn([*base, "--give-up", "2"], "g_bad")
    rc_bad = finish(bad, 30)
    check(rc_bad not in (0, None) and re.search(r"certificate|SSL", text("g_bad", "err")) is not None,
          f"a client without --ca refuses the self-signed certificate: exit {rc_bad}")
    cl = ff.spawn([*base, "--ca", w("cert.pem"), "--give-up", "30"], "g_cl")
    rc_c, rc_s = finish(cl, 60), finish(srv, 60)
    check(rc_c == 0 and rc_s == 0 and "round 1/1: clients 1/1" in text("g_srv"),
          f"a round over TLS: client {rc_c}, server {rc_s}")


def raw_register(port, auth, last=False):
    """POST /register with the raw Authorization header bytes (last: as the last header); the HTTP status
    (0: connection dropped)."""
    body = ff.layout_msg(ff.LAYOUT)
    others = b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n"
    auth_line = b"Authorization: " + auth + b"\r\n"
    req = b"POST /register HTTP/1.1\r\nHost: x\r\n" + (others + auth_line if last else auth_line + others) + b"\r\n" + body
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(req)
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    m = re.match(rb"HTTP/1\.[01] (\d+)", data)
    return int(m.group(1)) if m else 0


def test_bearer():
    print("== B: Authorization header parsing", flush=True)
    srv, port = serve("b_srv", "b_state", rounds=1, k=50, timeout=5)
    for auth, ok in [(b"Bearer good", True), (b"bearer good", True), (b"BEARER good", True),
                     (b"Bearer good x", False), (b"Basic good", False),
                     (b"Bearergood", False), (b"Bearer ", False), (b"Bearer goodx", False),
                     (b"Bearer good\0x", False), (b"Bearer good\0", False), (b"Bearer good\0\0\0", False),
                     (b"Bearer good\0 x", False), (b"Bearer good\t", False)]:
        for last in (False, True):
            st = raw_register(port, auth, last)
            check((st == 200) == ok and st in (200, 400, 401),
                  f"Authorization: {auth!r}{' (last header)' if last else ''}: {st}")
    srv.kill()
    srv.wait()


def main():
    try:
        ff.make_fixtures()
        test_poisoned_fedavgm()
        test_bearer()
        test_clip_and_cap()
        test_tokens()
        test_connections()
        test_slow_headers()
        test_slots()
        test_tls()
    finally:
        for p in ff.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return tl.finish("test_fl_hardening")


if __name__ == "__main__":
    sys.exit(main())
