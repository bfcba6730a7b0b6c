"""Grading at class scale: the same scores with --jobs 1 and --jobs 2, N machines splitting one class
with --shard against one shared PostgreSQL gradebook (a real server, started here), and a grading run
killed at any moment finishing on the next run with every grade present once."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from nbgrader.api import Gradebook

from grader.course import Course
from grader.dev import samples
from grader.grading.autograde import in_shard
from grader.grading.report import collect

# the sample submissions are made from the student release: made once per test run (conftest)
pytestmark = pytest.mark.usefixtures("release")

COURSE = Course.here()
CH = COURSE.chapter("qkv")


def small_class(inbox: Path, n: int = 6) -> dict[str, float]:
    """n submissions with known scores: correct, stub, and wrong variants in turn."""
    released = samples.released(COURSE, CH)
    variants = samples.student_code(COURSE, CH)
    points = samples.exercise_points(released)
    correct = {ex: v["correct"] for ex, v in variants.items()}
    wrong = [(ex, v) for ex, vs in sorted(variants.items()) for v in sorted(vs) if not samples.is_correct(v)]
    expect = {}
    for i in range(n):
        name = f"s{i:02d}"
        if i % 3 == 0:
            samples.hand_in(inbox, name, CH, samples.fill(released, correct))
            expect[name] = sum(points.values())
        elif i % 3 == 1:
            samples.hand_in(inbox, name, CH, released)
            expect[name] = 0.0
        else:
            ex, v = wrong[i % len(wrong)]
            samples.hand_in(inbox, name, CH, samples.fill(released, {**correct, ex: variants[ex][v]}))
            expect[name] = sum(points.values()) - points[ex]
    return expect


def autograde(inbox: Path, *args: str, wait: bool = True):
    cmd = [sys.executable, "-m", "grader", "autograde", str(inbox), *args]
    if not wait:
        return subprocess.Popen(cmd, cwd=COURSE.root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
    result = subprocess.run(cmd, cwd=COURSE.root, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def scores(db_url: str, workdir: Path) -> dict[str, float]:
    return {r.student: r.score for r in collect(COURSE.workspace(workdir, db_url)) if r.chapter == CH.id}


def test_shards_split_a_class_without_overlap_or_gaps():
    keys = [f"student{i}/ch02_qkv" for i in range(300)]
    parts = [{k for k in keys if in_shard(k, (i, 3))} for i in (1, 2, 3)]
    assert set().union(*parts) == set(keys)
    assert sum(len(p) for p in parts) == len(keys)
    assert all(len(p) > 50 for p in parts)  # roughly even


def test_jobs_1_gives_the_same_scores_as_the_expected_ones(tmp_path):
    expect = small_class(tmp_path / "in", n=6)
    autograde(tmp_path / "in", "--workdir", str(tmp_path / "w1"), "--jobs", "1")
    assert scores(f"sqlite:///{tmp_path / 'w1' / 'gradebook.db'}", tmp_path / "w1") == expect


# ---------------------------------------------------------------------------------------------------
# a real PostgreSQL server


def _postgres_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


@pytest.fixture(scope="module")
def postgres():
    bindir = _postgres_bin()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed (make system-deps installs Debian's postgresql)")
    user = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        pytest.skip("no postgres user to run the server as")
    root = Path(tempfile.mkdtemp(prefix="grader-pg-"))  # pytest's folders are closed to the server's user
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    for p in (root, sock):
        os.chown(p, pw.pw_uid, pw.pw_gid)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    def as_user(*cmd: str) -> subprocess.CompletedProcess:
        prefix = ["runuser", "-u", user, "--"] if os.geteuid() == 0 else []
        return subprocess.run([*prefix, *cmd], capture_output=True, text=True, timeout=120)

    r = as_user(str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "grader", "--no-sync")
    assert r.returncode == 0, r.stderr
    r = as_user(str(bindir / "pg_ctl"), "-D", str(data), "-w", "-l", str(root / "log"), "-o",
                f"-p {port} -k {sock} -c listen_addresses='' -c fsync=off", "start")
    assert r.returncode == 0, r.stdout + r.stderr + (root / "log").read_text()
    try:
        r = as_user(str(bindir / "createdb"), "-h", str(sock), "-p", str(port), "-U", "grader", "gradebook")
        assert r.returncode == 0, r.stderr
        yield f"postgresql+psycopg2://grader@/gradebook?host={sock}&port={port}"
    finally:
        as_user(str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(root, ignore_errors=True)


def test_two_machines_share_a_postgresql_gradebook_with_shards(postgres, tmp_path):
    expect = small_class(tmp_path / "in", n=8)
    first = autograde(tmp_path / "in", "--db", postgres, "--workdir", str(tmp_path / "m1"), "--shard", "1/2",
                      wait=False)
    second = autograde(tmp_path / "in", "--db", postgres, "--workdir", str(tmp_path / "m2"), "--shard", "2/2",
                       wait=False)
    for proc in (first, second):
        out, _ = proc.communicate(timeout=1200)
        assert proc.returncode == 0, out[-3000:]
    assert scores(postgres, tmp_path / "m1") == expect
    engine = sa.create_engine(postgres)
    with engine.connect() as conn:
        n = conn.execute(sa.text("SELECT count(*) FROM submitted_assignment")).scalar()
        runs = conn.execute(sa.text("SELECT count(*) FROM grader_runs")).scalar()
    engine.dispose()
    assert n == runs == len(expect)


def test_a_killed_run_finishes_on_the_next_with_every_grade_once(postgres, tmp_path):
    expect = small_class(tmp_path / "in", n=8)
    url = postgres.replace("/gradebook?", "/crash?")
    bindir = _postgres_bin()
    host = dict(p.split("=") for p in postgres.split("?")[1].split("&"))
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    subprocess.run([*prefix, str(bindir / "createdb"), "-h", host["host"], "-p", host["port"], "-U", "grader",
                    "crash"], check=True, capture_output=True)
    work = tmp_path / "w"
    proc = autograde(tmp_path / "in", "--db", url, "--workdir", str(work), "--jobs", "2", wait=False)
    deadline = time.monotonic() + 600
    engine = sa.create_engine(url)
    graded = 0
    while time.monotonic() < deadline and proc.poll() is None:  # kill it in the middle of the class
        try:
            with engine.connect() as conn:
                graded = conn.execute(sa.text("SELECT count(*) FROM grader_runs")).scalar()
        except sa.exc.SQLAlchemyError:
            graded = 0
        if graded >= 3:
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert 0 < graded < len(expect), "the run should have been killed half-way"
    autograde(tmp_path / "in", "--db", url, "--workdir", str(work), "--jobs", "2")
    assert scores(url, work) == expect
    with Gradebook(url) as gb:
        assert len(gb.find_assignment(CH.id).submissions) == len(expect)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM grader_runs")).scalar() == len(expect)
    engine.dispose()
    shutil.rmtree(work, ignore_errors=True)


def _createdb(postgres: str, name: str) -> str:
    bindir = _postgres_bin()
    host = dict(p.split("=") for p in postgres.split("?")[1].split("&"))
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    subprocess.run([*prefix, str(bindir / "createdb"), "-h", host["host"], "-p", host["port"], "-U", "grader", name],
                   check=True, capture_output=True)
    return postgres.replace("/gradebook?", f"/{name}?")


@pytest.mark.parametrize("scheduler", ["slurm", "kubernetes"])
def test_shards_from_a_scheduler_fill_one_postgresql_gradebook_exactly_once(postgres, tmp_path, scheduler):
    """`--shard auto` as a Slurm job array (ids 4-6: SLURM_ARRAY_TASK_MIN matters) or a Kubernetes Indexed
    Job (JOB_COMPLETION_INDEX 0-1 with GRADER_SHARD_COUNT) would run it: every grade lands once."""
    expect = small_class(tmp_path / "in", n=7)
    url = _createdb(postgres, f"sched_{scheduler}")
    if scheduler == "slurm":
        envs = [{"SLURM_ARRAY_TASK_ID": str(i), "SLURM_ARRAY_TASK_MIN": "4", "SLURM_ARRAY_TASK_MAX": "6",
                 "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_JOB_ID": "1234"} for i in (4, 5, 6)]
    else:
        envs = [{"JOB_COMPLETION_INDEX": str(i), "GRADER_SHARD_COUNT": "2"} for i in (0, 1)]
    procs = []
    for k, extra in enumerate(envs):
        env = {key: v for key, v in os.environ.items() if not key.startswith(("SLURM_", "JOB_COMPLETION"))}
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "grader", "autograde", str(tmp_path / "in"), "--db", url, "--workdir",
             str(tmp_path / f"node{k}"), "--shard", "auto"], cwd=COURSE.root, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, env={**env, **extra}))
    outs = []
    for proc in procs:
        out, _ = proc.communicate(timeout=1200)
        assert proc.returncode == 0, out[-3000:]
        outs.append(out)
    count = len(envs)
    for k, out in enumerate(outs):
        assert f"shard {k + 1}/{count}" in out.splitlines()[0]
    assert scores(url, tmp_path / "node0") == expect
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        subs = conn.execute(sa.text("SELECT count(*), count(DISTINCT student_id) FROM submitted_assignment")).one()
        runs = conn.execute(sa.text("SELECT count(*) FROM grader_runs")).scalar()
        grades = conn.execute(sa.text("SELECT count(*), count(DISTINCT (notebook_id, cell_id)) FROM grade")).one()
    engine.dispose()
    assert tuple(subs) == (len(expect), len(expect)) and runs == len(expect)
    with Gradebook(url) as gb:
        cells = len(gb.find_assignment(CH.id).notebooks[0].grade_cells)
    assert tuple(grades) == (len(expect) * cells, len(expect) * cells)
