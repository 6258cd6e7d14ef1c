"""Faults of `otter fl serve` / `otter fl client` on loopback (tiny Gemm classifier, 15 parameters):

A. bad updates: this script speaks the protocol itself (src/fl/protocol.h) as three clients and sends a
   truncated, a wrong-size, a wrong-layout, a NaN, an Inf, a wrong-round, a zero-example, a bad-token and a
   token-less update, and a duplicate: each refused (400/401/409) and logged; bad registration tokens (401)
   and another model's layout (400 naming 'W') are refused too. The next round's global weights must equal
   the example-weighted mean of the three good updates (computed here in float64) exactly.
B. a client killed (SIGKILL) mid-round, after fetching the weights: the round closes at the timeout with the
   two others (dropped 1) and the next round runs without it.
C. the server killed (SIGKILL) mid-run and restarted with the same command: it resumes from the last completed
   round, the clients reconnect (backoff, re-registration), and the final global model equals an
   uninterrupted run's.
D. 200 concurrent `otter fl client` processes, 3 rounds of 200: every update accepted, nothing dropped or
   refused, every client exits 0.
"""
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
import http.client

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as nh

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as tl  # noqa: E402
from testlib import check  # noqa: E402

WORK = tl.work_dir("fl_faults")

procs = []


def w(*p):
    return os.path.join(WORK, *p)


def spawn(args, name):
    out = open(w(name + ".out"), "w")
    err = open(w(name + ".err"), "w")
    p = subprocess.Popen([tl.CLI, *args], stdout=out, stderr=err)
    p.name = name
    procs.append(p)
    return p


def text(name, stream="out"):
    try:
        with open(w(f"{name}.{stream}")) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def wait_for(name, pattern, timeout, stream="out", proc=None):
    end = time.time() + timeout
    while time.time() < end:
        m = re.search(pattern, text(name, stream))
        if m:
            return m
        if proc is not None and proc.poll() is not None:
            m = re.search(pattern, text(name, stream))
            return m
        time.sleep(0.05)
    return None


def finish(p, timeout):
    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        return None


def serve(name, state, *extra, rounds=2, k=3, m=None, timeout=60, poll=50):
    args = ["fl", "serve", "--artifacts", w("art"), "--rounds", str(rounds), "--clients-per-round", str(k),
            "--min-clients", str(m or k), "--round-timeout", str(timeout), "--listen", "127.0.0.1:0",
            "--state", w(state), "--token", "good", "--poll-ms", str(poll), *extra]
    p = spawn(args, name)
    mt = wait_for(name, r"listening on http://127\.0\.0\.1:(\d+)", 20, proc=p)
    check(mt is not None, f"{name}: server listening")
    return p, (int(mt.group(1)) if mt else 0)


def client(name, port, part, n, *extra):
    return spawn(["fl", "client", "--server", f"http://127.0.0.1:{port}", "--token", "good", "--artifacts",
                  w("art"), "--data", f"npy:{w('x.npy')},{w('y.npy')}", "--partition", f"{part}/{n}", "--lr", "0.1",
                  "--threads", "1", "--give-up", "60", *extra], name)


# ---- the protocol, written independently of the C code -----------------------------------------------------

HDR = struct.Struct("<4sHHqqdQQI12x")
assert HDR.size == 64


def layout_entries(params):
    out = b""
    for name, dims in params:
        nb = name.encode()
        out += struct.pack("<H", len(nb)) + nb + struct.pack("<BB", 1, len(dims)) + struct.pack(f"<{len(dims)}q", *dims)
    return out


def layout_msg(params):
    return b"OTFL" + struct.pack("<HHI", 1, 3, len(params)) + layout_entries(params)


def fnv1a(b):
    h = 1469598103934665603
    for x in b:
        h = ((h ^ x) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


LAYOUT = [("W", [4, 3]), ("b", [3])]
HASH = fnv1a(layout_entries(LAYOUT))
N = 15


def msg(kind, rnd, examples, values, loss=0.5, n=None, lhash=HASH):
    vals = np.asarray(values, dtype="<f4")
    return HDR.pack(b"OTFL", 1, kind, rnd, examples, loss, len(vals) if n is None else n, lhash, 1) + vals.tobytes()


def decode_params(body, rnd):
    magic, ver, kind, r, ex, loss, n, h, flags = HDR.unpack(body[:64])
    assert magic == b"OTFL" and ver == 1 and kind == 1 and r == rnd and n == N and h == HASH, (magic, kind, r, n)
    assert len(body) == 64 + 4 * n
    return np.frombuffer(body[64:], dtype="<f4").copy()


class Proto:
    def __init__(self, port):
        self.port = port
        self.token = None

    def req(self, method, path, body=None, token="self"):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        h = {}
        tok = self.token if token == "self" else token
        if tok is not None:
            h["Authorization"] = "Bearer " + tok
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data

    def register(self, token="good", params=LAYOUT):
        st, body = self.req("POST", "/register", layout_msg(params), token=token)
        if st == 200:
            self.token = re.search(rb"token (\S+)", body).group(1).decode()
        return st, body

    def wait_train(self, rnd, timeout=20):
        end = time.time() + timeout
        while time.time() < end:
            st, body = self.req("GET", "/round")
            if st == 200 and body.startswith(b"train %d\n" % rnd):
                return True
            time.sleep(0.02)
        return False


# ---- fixtures --------------------------------------------------------------------------------------------

def make_fixtures():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    rng = np.random.default_rng(0)
    W = rng.normal(0, 0.1, (4, 3)).astype(np.float32)
    b = np.zeros(3, np.float32)
    g = oh.make_graph([oh.make_node("Gemm", ["x", "W", "b"], ["y"])], "tiny",
                      [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 4])],
                      [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 3])],
                      [nh.from_array(W, "W"), nh.from_array(b, "b")])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, w("tiny.onnx"))
    n = 400
    c = rng.integers(0, 3, n)
    centers = rng.normal(0, 2, (3, 4))
    np.save(w("x.npy"), (centers[c] + rng.normal(0, 1, (n, 4))).astype(np.float32))
    np.save(w("y.npy"), c.astype(np.int64))
    r = tl.otter("artifacts", w("tiny.onnx"), "-o", w("art"), "--optimizer", "SGD", echo=False)
    check(r.returncode == 0, "artifacts for the tiny model: " + r.stdout.strip().splitlines()[0])


# ---- A: malformed, wrong-shape, NaN, wrong-round and bad-token updates -------------------------------------

def test_bad_updates():
    print("== A: bad updates are refused and leave the aggregate untouched", flush=True)
    srv, port = serve("a_srv", "a_state", rounds=2, k=3)
    anon = Proto(port)
    st, _ = anon.register(token="bad")
    check(st == 401, f"registration with a wrong token: {st}")
    st, _ = anon.register(token=None)
    check(st == 401, f"registration without a token: {st}")
    st, body = anon.register(params=[("W", [4, 4]), ("b", [3])])
    check(st == 400 and b"'W'" in body, f"registration with another model's layout: {st} {body.strip().decode()}")
    cs = [Proto(port) for _ in range(3)]
    for c in cs:
        st, _ = c.register()
        check(st == 200, f"registration: {st}")
    check(all(c.wait_train(1) for c in cs), "all three picked for round 1")
    st, body = cs[0].req("GET", "/params")
    g0 = decode_params(body, 1)
    st2, _ = anon.req("GET", "/params", token="1-00000000000000000000000000000000")
    check(st2 == 401, f"GET /params with a forged token: {st2}")
    good = [g0 + np.float32(0.01) * (i + 1) * np.arange(1, N + 1, dtype=np.float32) for i in range(3)]
    examples = [10, 20, 30]
    ok_msg = msg(2, 1, 10, good[0])
    nan = good[0].copy(); nan[13] = np.nan
    inf = good[0].copy(); inf[2] = np.inf
    bad = [
        ("truncated", ok_msg[:64 + 30], None, 400),
        ("wrong size (14 floats)", msg(2, 1, 10, good[0][:14]), None, 400),
        ("wrong shape (W as [3,4])", msg(2, 1, 10, good[0], lhash=fnv1a(layout_entries([("W", [3, 4]), ("b", [3])]))),
         None, 400),
        ("NaN", msg(2, 1, 10, nan), None, 400),
        ("Inf", msg(2, 1, 10, inf), None, 400),
        ("wrong round", msg(2, 2, 10, good[0]), None, 400),
        ("zero examples", msg(2, 1, 0, good[0]), None, 400),
        ("NaN loss", msg(2, 1, 10, good[0], loss=float("nan")), None, 400),
        ("bad token", ok_msg, "1-deadbeefdeadbeefdeadbeefdeadbeef", 401),
        ("no token", ok_msg, None, 401),
    ]
    for what, body, tok, want in bad:
        st, resp = cs[0].req("POST", "/update", body, token=tok if what in ("bad token", "no token") else "self")
        check(st == want, f"update {what}: {st} {resp.strip().decode()[:110]}")
    st, resp = cs[0].req("POST", "/update", msg(2, 1, examples[0], good[0]))
    check(st == 200, f"good update 1: {st}")
    st, resp = cs[0].req("POST", "/update", msg(2, 1, examples[0], good[0]))
    check(st == 409, f"duplicate update: {st} {resp.strip().decode()}")
    for i in (1, 2):
        st, resp = cs[i].req("POST", "/update", msg(2, 1, examples[i], good[i]))
        check(st == 200, f"good update {i + 1}: {st}")
    check(all(c.wait_train(2) for c in cs), "round 2 opened for all three")
    st, body = cs[0].req("GET", "/params")
    g1 = decode_params(body, 2)
    want = (sum(np.float64(e) * g.astype(np.float64) for e, g in zip(examples, good)) / sum(examples)).astype(np.float32)
    diff = float(np.max(np.abs(g1.astype(np.float64) - want)))
    check(diff == 0.0, f"global after round 1 == weighted mean of the 3 good updates (max diff {diff:.3g})")
    for i in range(3):
        cs[i].req("POST", "/update", msg(2, 2, examples[i], g1))
    rc = finish(srv, 30)
    out, err = text("a_srv"), text("a_srv", "err")
    check(rc == 0, f"server exit {rc}")
    m = re.search(r"round 1/2: clients 3/3, dropped 0, refused (\d+)", out)
    check(m is not None and int(m.group(1)) == 11, "round 1 line counts 11 refused updates: " +
          (m.group(0) if m else out))
    n_logged = len(re.findall(r"refused update", err))
    n_reg = len(re.findall(r"refused registration", err))
    check(n_logged == 11 and n_reg == 3, f"refusals logged: {n_logged} updates, {n_reg} registrations")
    for what in ("truncated", "NaN", "Inf", "wrong round", "wrong shape", "(401)"):
        check(what in err, f"log names '{what}'")
    print("\n".join(l for l in err.splitlines() if "refused" in l)[:3000])


# ---- B: a client killed mid-round ---------------------------------------------------------------------------

VICTIM = r"""
import http.client, re, struct, sys, time
port = int(sys.argv[1]); layout = bytes.fromhex(sys.argv[2])
def req(m, p, body=None, tok=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request(m, p, body=body, headers={"Authorization": "Bearer " + tok})
    r = c.getresponse(); d = r.read(); c.close(); return r.status, d
st, body = req("POST", "/register", layout, "good")
tok = re.search(rb"token (\S+)", body).group(1).decode()
while True:
    st, body = req("GET", "/round", tok=tok)
    if body.startswith(b"train"):
        break
    time.sleep(0.05)
st, body = req("GET", "/params", tok=tok)
print("fetched", len(body), flush=True)
time.sleep(1000)
"""


def test_killed_client():
    print("== B: a client killed mid-round", flush=True)
    srv, port = serve("b_srv", "b_state", rounds=2, k=3, m=2, timeout=4, poll=100)
    with open(w("victim.py"), "w") as f:
        f.write(VICTIM)
    vo = open(w("victim.out"), "w")
    victim = subprocess.Popen([sys.executable, w("victim.py"), str(port), layout_msg(LAYOUT).hex()], stdout=vo)
    victim.name = "victim"
    procs.append(victim)
    cl = [client(f"b_cl{i}", port, i, 2) for i in range(2)]
    fetched = wait_for("victim", r"fetched", 20)
    check(fetched is not None, "the victim was picked and fetched the weights")
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    rc = finish(srv, 40)
    out, err = text("b_srv"), text("b_srv", "err")
    check(rc == 0, f"server exit {rc}")
    m1 = re.search(r"round 1/2: clients (\d+)/(\d+), dropped (\d+).*, ([\d.]+)s", out)
    check(m1 is not None and m1.group(1, 2, 3) == ("2", "3", "1") and float(m1.group(4)) >= 4.0,
          "round 1 closed at the 4 s timeout with 2 of 3, 1 dropped: " + (m1.group(0) if m1 else out))
    m2 = re.search(r"round 2/2: clients (\d+)/(\d+), dropped (\d+)", out)
    check(m2 is not None and m2.group(1, 2, 3) == ("2", "2", "0"),
          "round 2 ran with the two live clients: " + (m2.group(0) if m2 else out))
    check("timeout after 4.0s: closing with 2 of 3 updates, 1 late clients dropped" in err, "timeout logged")
    for i, p in enumerate(cl):
        check(finish(p, 30) == 0, f"client {i} exit 0: {text(f'b_cl{i}').strip().splitlines()[-1:]}")


# ---- C: the server killed and restarted ---------------------------------------------------------------------

def dump(ckpt, d):
    r = tl.otter("checkpoint", "dump", ckpt, "--npy-dir", d, echo=False)
    check(r.returncode == 0, f"dump {os.path.basename(ckpt)}")
    man = json.load(open(os.path.join(d, "manifest.json")))
    return {k: np.load(os.path.join(d, v["file"])) for k, v in man.items() if "/" not in k}


def run_c(tag, kill_after=None):
    args = dict(rounds=8, k=3, timeout=30)
    srv, port = serve(f"c_{tag}_srv", f"c_{tag}_state", "--save", w(f"c_{tag}.ckpt"), **args)
    # client 2 trains 4000 local epochs, clients 0 and 1 one: the kill below lands while client 2 is training,
    # after the others' updates for that round were accepted
    cl = [client(f"c_{tag}_cl{i}", port, i, 3, "--local-epochs", "4000" if i == 2 else "1") for i in range(3)]
    resumed = None
    if kill_after:
        # kill as soon as one client's update for the next round is accepted: usually mid-round, with some
        # updates of the open round received (they are lost with the process; that round is trained again)
        seen = wait_for(f"c_{tag}_cl0", rf"round {kill_after + 1}: .*accepted", 60)
        check(seen is not None, f"client 0's update for round {kill_after + 1} accepted before the kill")
        srv.send_signal(signal.SIGKILL)
        srv.wait()
        printed = [int(x) for x in re.findall(r"round (\d+)/8:", text(f"c_{tag}_srv"))]
        time.sleep(1.5)  # clients see the server away and back off
        shutil.copy(w(f"c_{tag}_srv.out"), w(f"c_{tag}_srv1.out"))
        # the same command again; the port is fixed now so the clients find it
        srv = spawn(["fl", "serve", "--artifacts", w("art"), "--rounds", "8", "--clients-per-round", "3",
                     "--min-clients", "3", "--round-timeout", "30", "--listen", f"127.0.0.1:{port}", "--state",
                     w(f"c_{tag}_state"), "--token", "good", "--poll-ms", "50", "--save", w(f"c_{tag}.ckpt")],
                    f"c_{tag}_srv2")
        m = wait_for(f"c_{tag}_srv2", r"resumed at round (\d+) of 8", 20, proc=srv)
        resumed = int(m.group(1)) if m else None
        printed = printed or [0]
        check(resumed is not None and resumed >= max(printed),
              f"restarted server resumed at round {resumed} (last round printed before the kill: {max(printed)})")
        # Usually mid-round (updates of round kill_after + 1 received, then lost); on a fast machine the round
        # may have closed first. Either way the server must resume from the last round it completed.
        check(resumed in (kill_after, kill_after + 1),
              f"the kill landed in or just after round {kill_after + 1}: resumed at {resumed}")
        out2 = text(f"c_{tag}_srv2")
    rc = finish(srv, 90)
    check(rc == 0, f"{tag}: server exit {rc}")
    if kill_after:
        out2 = text(f"c_{tag}_srv2")
        rounds2 = [int(x) for x in re.findall(r"round (\d+)/8:", out2)]
        check(resumed is not None and rounds2 == list(range(resumed + 1, 9)),
              f"rounds after the restart: {rounds2} (expected {resumed + 1 if resumed else '?'}..8)")
    for i, p in enumerate(cl):
        rcc = finish(p, 60)
        last = text(f"c_{tag}_cl{i}").strip().splitlines()[-1:]
        check(rcc == 0, f"{tag}: client {i} exit {rcc}: {last}")
        if kill_after:
            check(re.search(r"[2-9]\d* registrations", text(f"c_{tag}_cl{i}")) is not None,
                  f"client {i} registered again after the restart")
    return dump(w(f"c_{tag}.ckpt"), w(f"c_{tag}_dump"))


def test_server_restart():
    print("== C: the server SIGKILLed in round 4 and restarted", flush=True)
    ref = run_c("ref")
    got = run_c("int", kill_after=3)
    worst = None
    for k in ref:  # tl.worse: a NaN anywhere fails (max() keeps or drops it by position)
        worst = tl.worse(worst or 0.0, float(np.max(np.abs(ref[k].astype(np.float64) - got.get(k, np.nan)))))
    check(ref.keys() == got.keys() and len(ref) == 2 and worst is not None and worst <= 1e-6,
          f"final global of the interrupted run == uninterrupted run (max diff {worst})")


# ---- D: 200 concurrent clients ------------------------------------------------------------------------------

def test_many_clients():
    n = 200
    print(f"== D: {n} concurrent client processes", flush=True)
    t0 = time.time()
    srv, port = serve("d_srv", "d_state", "--threads", "2", rounds=3, k=n, m=n, timeout=120, poll=500)
    cl = [client(f"d_cl{i}", port, i, n) for i in range(n)]
    rc = finish(srv, 300)
    out, err = text("d_srv"), text("d_srv", "err")
    check(rc == 0, f"server exit {rc}")
    lines = re.findall(r"round (\d)/3: clients (\d+)/(\d+), dropped (\d+), refused (\d+).*, ([\d.]+)s", out)
    check(len(lines) == 3 and all(l[1:5] == (str(n), str(n), "0", "0") for l in lines),
          f"3 rounds of {n}/{n}, none dropped or refused: {[l[0] + ': ' + l[1] + '/' + l[2] + ' ' + l[5] + 's' for l in lines]}")
    check("warning" not in err, f"no warnings in the server log ({len(err.splitlines())} lines)")
    rcs = [finish(p, 120) for p in cl]
    bad = [i for i, r in enumerate(rcs) if r != 0]
    check(not bad, f"all {n} clients exit 0 (failed: {bad[:10]})")
    warn = [i for i in range(n) if "warning" in text(f"d_cl{i}", "err")]
    check(not warn, f"no client needed a retry (with warnings: {warn[:10]})")
    print(f"{n} clients, 3 rounds: {time.time() - t0:.1f}s wall")


def main():
    try:
        make_fixtures()
        test_bad_updates()
        test_killed_client()
        test_server_restart()
        test_many_clients()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return tl.finish("test_fl_faults")


if __name__ == "__main__":
    sys.exit(main())
