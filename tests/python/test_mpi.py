"""The backend under mpirun (2 ranks): CPU tensors ride MPI, not the Gloo helper: through shared memory over
it with RINGGUARD_CPU_TRANSPORT=auto (the ranks share this host), over MPI alone with =mpi (a subgroup's
pg_options). One mpirun launch runs every check below on both ranks, each writing its results to a JSON file; the
pytest side asserts on them. The launch runs under a wall-clock limit, so a hang fails the test.

    mpirun -np 2 python3 tests/python/test_mpi.py --worker      # what the test runs
"""

import json
import os
import shutil
import sys

import pytest

NPROC = 2


def worker() -> None:
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    import ringguard

    rank, size = ringguard.init_from_mpi()
    dist.init_process_group("ringguard")
    out = {"rank": rank, "transport": ringguard.transport("cpu")}

    # Exact sums: small integers in f32 do not depend on the summation order.
    t = torch.arange(10000, dtype=torch.float32) % 101 + rank
    dist.all_reduce(t)
    want = 2 * (torch.arange(10000, dtype=torch.float32) % 101) + sum(range(size))
    out["allreduce_exact"] = bool(torch.equal(t, want))
    b = torch.full((1000,), float(rank + 3))
    dist.broadcast(b, src=1)
    out["broadcast_exact"] = bool(torch.equal(b, torch.full((1000,), 4.0)))
    gathered = [torch.zeros(7, dtype=torch.int64) for _ in range(size)]
    dist.all_gather(gathered, torch.full((7,), rank + 11, dtype=torch.int64))
    out["allgather_exact"] = all(torch.equal(g, torch.full((7,), r + 11, dtype=torch.int64))
                                 for r, g in enumerate(gathered))

    # DDP for a few steps with fault injection: every corruption detected and repaired.
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ringguard.set_fault(prob=0.05, mode="retransmit", seed=5)
    gen = torch.Generator().manual_seed(rank)
    for _ in range(10):
        x = torch.randn(32, 64, generator=gen)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    ringguard.set_fault(prob=0)
    c = ringguard.counters()
    out.update({k: c[k] for k in ("injected", "detected", "escaped", "retransmitted")})
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    copies = [torch.zeros_like(flat) for _ in range(size)]
    dist.all_gather(copies, flat)
    out["params_identical"] = all(torch.equal(copies[0], c2) for c2 in copies)

    # A subgroup gets its own MPI communicator over exactly its members; this one over MPI alone.
    g = dist.new_group([0, 1], backend="ringguard", pg_options=ringguard.Options(cpu_transport="mpi"))
    s = torch.ones(5)
    dist.all_reduce(s, group=g)
    out["subgroup_transport"] = ringguard.transport("cpu", group=g)
    out["subgroup_exact"] = bool(torch.equal(s, torch.full((5,), 2.0)))
    dist.destroy_process_group(g)
    dist.destroy_process_group()
    # One file per rank: mpirun merges the ranks' stdout, and two lines can interleave.
    with open(os.path.join(os.environ["RINGGUARD_TEST_OUT"], f"rank{rank}.json"), "w") as f:
        json.dump(out, f)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    import harness

    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun not found (apt-get install openmpi-bin)")
    env = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(harness.free_port())}
    out_dir = tmp_path_factory.mktemp("mpi")
    env["RINGGUARD_TEST_OUT"] = str(out_dir)
    cmd = [mpirun, "--oversubscribe", "--bind-to", "none", "-np", str(NPROC), sys.executable, "-u",
           os.path.abspath(__file__), "--worker"]
    rc, timed_out, secs, log = harness.run_command(cmd, env, timeout=240)
    assert not timed_out, f"mpirun launch timed out after {secs:.0f} s\n{log[-4000:]}"
    assert rc == 0, f"mpirun launch failed (rc={rc})\n{log[-4000:]}"
    recs = []
    for r in range(NPROC):
        path = out_dir / f"rank{r}.json"
        assert path.exists(), f"rank {r} wrote no result\n{log[-4000:]}"
        recs.append(json.loads(path.read_text()))
    assert sorted(r["rank"] for r in recs) == list(range(NPROC)), recs
    return recs


def test_cpu_tensors_ride_mpi(results):
    for r in results:
        assert r["transport"] == "shm", r
        assert r["subgroup_transport"] == "mpi", r


def test_collectives_exact(results):
    for r in results:
        assert r["allreduce_exact"] and r["broadcast_exact"] and r["allgather_exact"], r
        assert r["subgroup_exact"], r


def test_ddp_with_faults(results):
    for r in results:
        assert r["params_identical"], r
        assert r["escaped"] == 0 and r["detected"] == r["injected"], r
    assert sum(r["injected"] for r in results) > 0, results


def port_worker() -> None:
    """init_from_mpi() with no MASTER_PORT: the ranks agree on a free port; then one exact all_reduce."""
    import torch
    import torch.distributed as dist

    import ringguard

    assert "MASTER_PORT" not in os.environ
    rank, size = ringguard.init_from_mpi()
    dist.init_process_group("ringguard")
    t = torch.full((100,), float(rank + 1))
    dist.all_reduce(t)
    out = {"rank": rank, "port": int(os.environ["MASTER_PORT"]),
           "exact": bool(torch.equal(t, torch.full((100,), float(size * (size + 1) // 2))))}
    dist.destroy_process_group()
    with open(os.path.join(os.environ["RINGGUARD_TEST_OUT"], f"port{rank}.json"), "w") as f:
        json.dump(out, f)


def test_two_jobs_on_one_host_agree_on_free_ports(tmp_path):
    """Defect 7 (issue 17): init_from_mpi() defaulted MASTER_PORT to 29500, so two jobs on one host collided.
    Two mpirun jobs at once, neither setting MASTER_PORT: each agrees on a port of its own and runs."""
    import threading

    import harness

    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun not found (apt-get install openmpi-bin)")
    base = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "OMPI_MCA_rmaps_base_oversubscribe": "1", "MASTER_ADDR": "127.0.0.1"}
    outs = [tmp_path / "a", tmp_path / "b"]
    runs = [None, None]

    def launch(i):
        d = outs[i]
        d.mkdir()
        cmd = [mpirun, "--oversubscribe", "--bind-to", "none", "-np", str(NPROC), "-x", "RINGGUARD_TEST_OUT",
               sys.executable, "-u", os.path.abspath(__file__), "--port-worker"]
        env = dict(base, RINGGUARD_TEST_OUT=str(d))
        runs[i] = harness.run_command(cmd, env, timeout=240)

    saved = os.environ.pop("MASTER_PORT", None)  # the launches inherit os.environ
    try:
        threads = [threading.Thread(target=launch, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        if saved is not None:
            os.environ["MASTER_PORT"] = saved
    ports = []
    for i, (rc, timed_out, secs, log) in enumerate(runs):
        assert not timed_out and rc == 0, f"job {i}: rc={rc} timed_out={timed_out}\n{log[-4000:]}"
        recs = [json.loads((outs[i] / f"port{r}.json").read_text()) for r in range(NPROC)]
        assert all(r["exact"] for r in recs), recs
        assert len({r["port"] for r in recs}) == 1, recs  # the ranks of one job agree
        ports.append(recs[0]["port"])
    assert ports[0] != ports[1], ports


def stopped_worker() -> None:
    """Defect 2 (issue 17): rank 1 stops (SIGSTOP) 50 ms into a 64 MiB all_reduce and stays stopped for 30 s;
    rank 0 times out, catches the error, destroys the group and exits normally, as docs/TORCH.md says to."""
    import signal
    import subprocess
    import threading
    import time
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    import ringguard

    rank, size = ringguard.init_from_mpi()
    dist.init_process_group("ringguard", pg_options=ringguard.Options(timeout=timedelta(seconds=1),
                                                                     slice_bytes=1 << 20))
    t = torch.ones(16)
    dist.all_reduce(t)  # every rank is in: the stop lands inside the big one
    if rank == 1:
        pid = os.getpid()  # a stopped process cannot resume itself: a shell does it, 30 s on
        subprocess.Popen(["sh", "-c", f"sleep 30; kill -CONT {pid}"], start_new_session=True)
        threading.Timer(0.05, lambda: os.kill(pid, signal.SIGSTOP)).start()
    big = torch.ones(16 << 20)
    try:
        dist.all_reduce(big)
        out = {"rank": rank, "error": ""}
    except Exception as e:  # noqa: BLE001  (what a training script does before it leaves)
        out = {"rank": rank, "error": str(e)}
    dist.destroy_process_group()
    with open(os.path.join(os.environ["RINGGUARD_TEST_OUT"], f"stopped{rank}.json"), "w") as f:
        json.dump(out, f)
    time.sleep(0.1)
    sys.exit(0)  # a normal exit: ringguard's exit handler decides how MPI ends


def test_a_normal_exit_after_a_timeout_ends_the_job_through_mpi_abort(tmp_path):
    """Defect 2 (issue 17): torch under mpirun, a normal exit after a timeout with traffic in flight crashed in
    MPI_Finalize (2 of 3 runs). Now the exit handler ends the job with MPI_Abort(70), saying why: no crash,
    no wait for the stopped rank (it would resume only after 30 s)."""
    import harness

    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun not found (apt-get install openmpi-bin)")
    env = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(harness.free_port()), "RINGGUARD_TEST_OUT": str(tmp_path),
           # A rendezvous message then needs its receiver's progress, as between nodes.
           "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
           # MPI traffic left in flight is the subject: MPI alone carries the data (through shared memory
           # the 64 MiB all_reduce can end before the stop lands; tests/mpi/exit_after_failure.sh runs the
           # exit handler over shared memory too).
           "RINGGUARD_CPU_TRANSPORT": "mpi"}
    cmd = [mpirun, "--oversubscribe", "--bind-to", "none", "-np", str(NPROC), sys.executable, "-u",
           os.path.abspath(__file__), "--stopped-worker"]
    rc, timed_out, secs, log = harness.run_command(cmd, env, timeout=120)
    assert not timed_out, f"mpirun launch timed out after {secs:.0f} s\n{log[-4000:]}"
    rec = json.loads((tmp_path / "stopped0.json").read_text())
    assert "Timeout" in rec["error"] and "rank 0" in rec["error"], rec
    assert "MPI cannot be finalized safely: ending the job with MPI_Abort" in log, log[-4000:]
    assert rc == 70, f"rc={rc}\n{log[-4000:]}"
    assert "Segmentation fault" not in log and "signal 11" not in log, log[-4000:]
    assert secs < 30, f"the job waited for the stopped rank: {secs:.0f} s\n{log[-4000:]}"


def setting_worker() -> None:
    """init_from_mpi() without MASTER_PORT (the port is broadcast over MPI), then one exact all_reduce in
    a group made with this rank's RINGGUARD_CPU_TRANSPORT; writes the transport or the error."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    import ringguard

    rank, size = ringguard.init_from_mpi()
    try:
        dist.init_process_group("ringguard", timeout=timedelta(seconds=20))
        t = torch.full((10,), float(rank + 1))
        dist.all_reduce(t)
        out = {"rank": rank, "transport": ringguard.transport("cpu"),
               "exact": bool(torch.equal(t, torch.full((10,), float(size * (size + 1) // 2)))), "error": ""}
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001  (what the test asserts on)
        out = {"rank": rank, "error": str(e)}
    with open(os.path.join(os.environ["RINGGUARD_TEST_OUT"], f"setting{rank}.json"), "w") as f:
        json.dump(out, f)


def run_setting_workers(tmp_path, values):
    """One mpirun, rank r with RINGGUARD_CPU_TRANSPORT=values[r] (an MPMD launch), no MASTER_PORT."""
    import harness

    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun not found (apt-get install openmpi-bin)")
    env = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "MASTER_ADDR": "127.0.0.1",
           "RINGGUARD_TEST_OUT": str(tmp_path)}
    cmd = [mpirun, "--oversubscribe", "--bind-to", "none", "-x", "RINGGUARD_TEST_OUT"]
    for i, v in enumerate(values):
        if i:
            cmd.append(":")
        cmd += ["-np", "1", "-x", f"RINGGUARD_CPU_TRANSPORT={v}", sys.executable, "-u",
                os.path.abspath(__file__), "--setting-worker"]
    saved = os.environ.pop("MASTER_PORT", None)  # the launch inherits os.environ
    try:
        rc, timed_out, secs, log = harness.run_command(cmd, env, timeout=120)
    finally:
        if saved is not None:
            os.environ["MASTER_PORT"] = saved
    assert not timed_out, f"mpirun launch timed out after {secs:.0f} s\n{log[-4000:]}"
    return [json.loads((tmp_path / f"setting{r}.json").read_text()) for r in range(len(values))], log


def test_gloo_under_mpirun_keeps_the_gloo_helper(tmp_path):
    """RINGGUARD_CPU_TRANSPORT=gloo is the torch backend's: under mpirun init_from_mpi's port broadcast must
    not refuse it (its MPI bootstrap reads no transport setting), and the group rides the Gloo helper."""
    recs, log = run_setting_workers(tmp_path, ["gloo", "gloo"])
    for r in recs:
        assert r["error"] == "" and r["exact"] and r["transport"] == "gloo", (r, log[-3000:])


def test_ranks_whose_setting_picks_other_setups_fail_naming_both(tmp_path):
    """Under mpirun auto takes MPI and shm the Store: ranks that set those would each wait in the other's
    setup (MPI's without a timeout). They compare the values first and all fail, naming both, at once."""
    recs, log = run_setting_workers(tmp_path, ["auto", "shm"])
    want = ["rank 0 has auto, rank 1 has shm", "rank 1 has shm, rank 0 has auto"]
    for r in recs:
        assert "RINGGUARD_CPU_TRANSPORT differs between ranks" in r["error"], (r, log[-3000:])
        assert want[r["rank"]] in r["error"], r


if __name__ == "__main__" and "--worker" in sys.argv:
    worker()
if __name__ == "__main__" and "--port-worker" in sys.argv:
    port_worker()
if __name__ == "__main__" and "--stopped-worker" in sys.argv:
    stopped_worker()
if __name__ == "__main__" and "--setting-worker" in sys.argv:
    setting_worker()


def test_the_mpi_transport_under_torchrun_says_it_needs_mpirun(tmp_path):
    """RINGGUARD_CPU_TRANSPORT=mpi under torchrun (each rank an MPI job of its own): every rank fails its
    init with the same error saying that the job was not started by mpirun and what to set instead (rank 0
    said "rank 1 is outside MPI_COMM_WORLD", rank 1 something else)."""
    import harness

    script = tmp_path / "w.py"
    script.write_text("import torch, torch.distributed as dist, ringguard\n"
                      "dist.init_process_group('ringguard')\n"
                      "dist.all_reduce(torch.ones(2))\n")
    rc, timed_out, _, out = harness.run_command(harness.torchrun_cmd(str(script), 2),
                                                {"RINGGUARD_CPU_TRANSPORT": "mpi"}, timeout=180)
    assert not timed_out and rc != 0, out[-3000:]
    want = ("the group has torch rank 1 but MPI_COMM_WORLD has 1 process: RINGGUARD_CPU_TRANSPORT=mpi needs "
            "the job started by mpirun")
    assert out.count(want) >= 2, out[-3000:]
