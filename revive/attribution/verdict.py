"""Stage: verdict — field rules, root vs cascade, culprits (rank→node layout), action, guards and
the calibrated confidence."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from revive.attribution.calibrate import apply as apply_calibration
from revive.attribution.collect import (
    _STEP_TEARDOWN,
    MAX_CASCADES,
    _collect_job_log,
    _collect_kernel,
    _Ctx,
    _Ev,
    _nodes,
    _norm_host,
    _synthetic,
    ended_state,
    exit_code_zero,
)
from revive.attribution.explain import _explain_frame, _gpus
from revive.attribution.throughput import _recovered, _slow_hosts_from_compute, _slow_nodes, _straggler, survivable
from revive.attribution.timestamps import _prev_attempt_stalled, _ref_year, _silent_hang
from revive.logline import LINE_CAP as MAX_TEXT
from revive.logline import cap_line, log_int
from revive.models import (
    Action,
    Attribution,
    Category,
    Domain,
    Event,
    EvidenceBundle,
    JobState,
    PriorIncident,
    TriggerKind,
)
from revive.signatures.matcher import Matcher, split_prefix

_HW_CATEGORIES = {Category.gpu_hardware, Category.gpu_memory_ecc, Category.nvlink, Category.cuda_error}
_CONFIDENCE = {1: 0.9, 2: 0.85, 3: 0.85, 4: 0.6, 5: 0.5, 6: 0.5, 7: 0.5, 8: 0.3, 9: 0.25}
MIN_CONFIDENCE = 0.5
"""Policy floor (issue #8): below it the engine never recommends ``drain_and_requeue``. Read by
callers as a module constant until the policy file carries it."""
_AVOID_NODE_SIGS = {"megatron.rerun_other_gpu", "megatron.rerun_same_gpu"}
"""Verdicts of unsettled cause whose remedy is to run elsewhere: the node is named so the requeue
avoids it (Megatron's rerun state machine must resume on a different GPU to decide)."""
_GPU_REQUEST = re.compile(r"--gres[= ](?:\S*:)?gpu\b|--gpus(?:-per-(?:node|task|socket))?[= ]\S|\bSLURM_(?:JOB|STEP)_GPUS="
                          r"|\bnvidia\.com/gpu\b")
"""The job asked its scheduler for GPUs: srun/sbatch ``--gres=gpu:…``, ``--gpus[-per-node]=N``, Slurm's
``SLURM_JOB_GPUS=`` / ``SLURM_STEP_GPUS=``, a Kubernetes ``nvidia.com/gpu`` limit."""
_SYSTEM_DRAIN = {"storage.hung_task", "slurm.batch_script_missing", "nvrm.fabric_state_out_of_sync"}
"""System-domain signatures whose remedy is draining the node (a task stuck in D state on a wedged
mount; a driver whose NVLink fabric state is out of sync until fabric manager restarts or the node reboots): the one exception to "a drain only with domain hardware"."""
_NODE_FAILURE_HOST_SIGS = {"slurm.node_failure", "host.node_unreachable", "slurm.task_launch_failed",
                           "torchelastic.keepalive_failed", "ray.node_dead", "slurm.gres_count_low",
                           "host.node_ping_failed", "slurm.prolog_failed"}
"""Node-failure signatures whose ``host`` field names the node that failed (srun's "Node failure on H"
and "Task launch ... failed on node H"; "Prolog failure on node H"; an ssh connect to a job node that times out or has no route):
blame, not location."""


def _conf(_sig_id: str, default: float) -> float:
    return default



# ----------------------------------------------------------------------------- rules
def _apply_hardware_typical(ctx: _Ctx) -> None:
    app_roots_seen = False
    for ev in sorted(ctx.events, key=lambda e: e.seq):
        if ev.m.role == "root" and ev.domain == Domain.application:
            app_roots_seen = True
        if ev.m.id == "cuda.unknown_error" and not app_roots_seen:
            if ctx.first_progress_seq is not None and ctx.first_progress_seq < ev.seq:
                ev.domain, ev.tier, ev.action = Domain.hardware, 2, Action.drain_and_requeue
                ev.upgraded = ("CUDA 'unknown error' in a run that was making progress, with no "
                               "application error before it: typical of a GPU failing")


_BT_FRAME = re.compile(r"(?:^|[\s\]])(?P<lib>(?:/[^\s()\[\]]*/)?(?P<name>lib[\w+-]+|linux-vdso)\.so[\w.]*)\((?P<sym>[^)]*)\)")
"""One native backtrace frame: UCX's ``ucs_handle_error`` report (`` 3  /opt/nccl/lib/libnccl.so(+0x120057)
[0x7ff1...]``, UCX 1.x ucs/debug/debug.c) and Open MPI's (``[host:pid] [ 3] /.../libmpi.so.40(NBC_Progress+0x164)
[0x...]``, opal/util/stacktrace.c, Open MPI 4.x-5.x); glibc ``backtrace_symbols_fd`` prints the same shape."""
_HANDLER_LIBS = {"libucs", "linux-vdso", "libpthread", "libc", "libSegFault"}
"""Libraries of a backtrace's top frames that are the signal's delivery, not its cause (UCX's and Open MPI's
handlers, the kernel's sigreturn trampoline, glibc): the faulting frame is the first below them."""
_COMM_LIBS = re.compile(r"^lib(?:nccl|rccl|hccl|mpi|mpich|mpi_\w+|fabric|ucp|uct|nccl-net\w*|nccl_net\w*|oneccl|ccl)$")
"""Collective-communication libraries (NCCL, RCCL, HCCL, MPI, libfabric, UCX's protocol/transport layers,
NCCL net plugins, oneCCL)."""
BT_FRAMES_AFTER = 40
"""How many lines after the segfault line the faulting frame is looked for."""


def _faulting_library(lines: list[str], start: int) -> str:
    """The library of the first backtrace frame below the signal-handler frames, in the ``BT_FRAMES_AFTER``
    lines from ``start`` (0-based); ``""`` when none is printed."""
    for x in lines[start:start + BT_FRAMES_AFTER]:
        m = _BT_FRAME.search(x[:MAX_TEXT])
        if not m:
            continue
        name = m.group("name")
        if name in _HANDLER_LIBS or name.startswith("libc-") or "sigreturn" in m.group("sym"):
            continue
        return name
    return ""


def _apply_comm_library_segfault(ctx: _Ctx) -> None:
    """Rule 3az. A segmentation fault whose faulting frame lies in a collective-communication library
    (``_COMM_LIBS``) is that library's failure (an NCCL RAS-thread crash, NVIDIA/nccl 2.27; Open MPI's
    libnbc progressing a non-blocking collective on GPU buffers, CSCS Alps Open MPI known issues): the
    library version or its use, the same on every retry until one changes. A fault elsewhere (the
    program, the CUDA compiler) stays a crash of unknown cause."""
    segv = [e for e in ctx.events if e.m.id == "host.sigsegv" and e.source == ctx.bundle.job_log_source and e.line_no]
    lib = next((x for e in segv if _COMM_LIBS.match(x := _faulting_library(ctx.lines, e.line_no or 0))), "")
    if not lib:
        return
    for ev in segv:  # the launcher's "task N: Segmentation fault" restates the same crash
        ev.category, ev.domain, ev.action = Category.nccl_error, Domain.application, Action.stop_no_retry
        ev.upgraded = (f"the segmentation fault's faulting frame is in {lib}, a collective-communication "
                       "library: that library's failure (its version or the way it is used), which recurs "
                       "until one changes")


_NVLINK_XIDS = {74, 144, 145, 146, 147, 148, 149, 150}
_GPU_FAULT_XIDS = {31, 43, 48}
_GPU_FAULT_SIGS = {"cuda.oom", "cuda.cudnn_error", "cuda.dnn_init_failed"}
_SYSTEM_HINTS = {"host.p2p_blocker", "host.iommu_fault", "rccl.iommu_not_passthrough"}
_HANG_ONLY_HINTS = {"rccl.iommu_not_passthrough"}
"""System hints too common on healthy nodes to explain anything but a hang."""
_DMA_FAULT_HINTS = {"host.iommu_fault"}
"""IOMMU faults are DMA the node blocked: beside a CUDA error of unknown cause (an illegal access by
a peer-to-peer copy) they explain it too, not only hangs and NCCL errors."""
_WATCHDOG_SIGS = {"nccl.watchdog_timeout", "nccl.watchdog_terminated", "nccl.heartbeat_timeout"}


def _xid_code(ev: _Ev) -> int | None:
    if ev.m.id != "xid.event":
        return None
    code = ev.m.fields.get("effective_xid") or ev.m.fields.get("xid") or ""
    return log_int(code) if code.isdigit() else None


_HCA = re.compile(r"\b(?:hca|dev|device|HCA) (?:mlx\d_\d+|\w+_\d+)(?::\d+)?|\bmlx\d_\d+:\d+")
_CKPT_LOAD = re.compile(r"[Ll]oading (?:checkpoint|model|the model|weights|state dict|state_dict|shards|"
                        r"distributed checkpoint)|Loading checkpoint shards|load_checkpoint|torch\.load\(|"
                        r"from_pretrained\(")


_HOST_MEM = re.compile(r"CPU Virtual Memory:\s+used = [\d.]+ GB, percent = (?P<pct>[\d.]+)%")
"""DeepSpeed's host-memory report (deepspeed/runtime/utils.py ``see_memory_usage``, 0.9-0.16:
``CPU Virtual Memory:  used = <GB> GB, percent = <psutil.virtual_memory().percent>%``)."""
HOST_MEM_PRESSURE_PCT = 85.0
"""A host-memory reading at or above this, shortly before a SIGKILL, makes the kernel OOM killer the
likely sender (Linux mm/oom_kill.c acts only at exhaustion; the reading precedes the kill while
allocations are still growing, hence the margin). Revive's threshold, not a vendor figure."""


def pct_text(pct: float) -> str:
    return f"{pct:g}%"


def _host_memory_pressure(lines: list[str]) -> float | None:
    """The highest DeepSpeed host-memory reading (percent) in ``lines`` at or above the threshold."""
    best: float | None = None
    for x in lines:
        m = _HOST_MEM.search(x[:MAX_TEXT])
        if m:
            try:
                pct = float(m.group("pct"))
            except ValueError:
                continue
            if pct >= HOST_MEM_PRESSURE_PCT and (best is None or pct > best):
                best = pct
    return best


_CKPT_IO = re.compile(r"[Dd]ownload(?:ing|ed)? .*(?:checkpoint|shards?|weights)|[Ll]oading (?:distributed )?checkpoint|"
                      r"[Rr]estoring (?:from )?checkpoint|[Rr]eading checkpoint")


def _last_lines(lines: list[str], end: int, n: int, window: int) -> Iterator[str]:
    """The last ``n`` non-empty lines before index ``end`` (0-based, exclusive), stripped and capped at
    ``MAX_TEXT``, newest first, looking no further back than index ``end - window + 1``."""
    seen = 0
    for j in range(end - 1, max(-1, end - window), -1):
        x = lines[j].strip()
        if x:
            yield x[:MAX_TEXT]
            seen += 1
            if seen >= n:
                return


def _stalled_on_checkpoint_io(lines: list[str], end: int) -> bool:
    """The last few non-empty lines before ``end`` (0-based, exclusive) talk about checkpoint I/O."""
    return any(_CKPT_IO.search(x) for x in _last_lines(lines, end, 3, 40))


_PREPROCESS = re.compile(r"Running tokenizer on dataset|Grouping texts in chunks|Tokeniz(?:ing|e) (?:the )?(?:train(?:ing)? )?"
                         r"(?:dataset|data)\b|[Pp]reprocess(?:ing)? (?:the )?(?:train(?:ing)? )?(?:dataset|data)\b|"
                         r"^(?:\S+: )?Map(?: \(num_proc=\d+\))?:\s+\d+%|"
                         r"^(?:\S+: )?Preparing (?:the )?(?:train(?:ing)?|test|val(?:idation)?|eval(?:uation)?)? ?"
                         r"(?:set|dataset|data)\b.*\d+%\|")
"""Dataset preprocessing progress (Hugging Face ``datasets`` ``map`` bars and the transformers example
scripts' ``desc=`` strings such as "Running tokenizer on dataset", "Grouping texts in chunks of N"; a
tqdm bar a script names "Preparing test set..." while one rank builds its files, IGNF/myria3d#123)."""
_BAR = re.compile(r"(?P<pct>\d{1,3})%\|[^|]*\|\s*(?P<i>\d+)/(?P<n>\d+)\b")
"""A tqdm bar: ``<desc>: 100%|██████████| 330/330 [31:02<00:00, 5.64s/it]`` (tqdm 4.x ``format_meter``)."""


def _loop_finished_before(lines: list[str], end: int) -> str:
    """The last tqdm bar among the 5 non-empty lines before ``end`` (0-based, exclusive) if it
    shows its loop done (100 %, N/N), else ""."""
    for x in _last_lines(lines, end, 5, 60):
        m = _BAR.search(split_prefix(x)[0])
        if m:
            i, n = log_int(m.group("i")), log_int(m.group("n"))
            return x[:120] if m.group("pct") == "100" and i is not None and n and i >= n else ""
    return ""


_SAVE_START = re.compile(r"\b[Ss]aving (?:a |the )?(?:full |final |distributed |sharded |async |model )?checkpoint\b|"
                         r"\b[Ss]tart(?:ing|ed)? (?:to )?sav(?:e|ing) (?:the )?checkpoint\b|"
                         r"\b[Ss]aving (?:the )?(?:model|state[ _]dict|weights|optimizer state)(?: to| at| for|\.{3}|$)|"
                         r"\bSummoning checkpoint\b")
"""A line announcing that a checkpoint save begins (Megatron ``saving checkpoint at iteration N``,
torchtitan ``Saving a full checkpoint at step N``, HF Trainer ``Saving model checkpoint to DIR``,
Revive's example ``saving checkpoint at iteration N``, CompVis latent-diffusion / Stable Diffusion
``main.py`` ``melk()``: ``Summoning checkpoint.`` printed right before ``trainer.save_checkpoint``)."""
_SAVE_DONE = re.compile(r"\b[Ss]aved (?:a |the )?(?:\w+ )?(?:checkpoint|model|state|weights)|\bsaved (?:in|to|at)\b|"
                        r"[Cc]heckpoint (?:saved|written|complete)|[Ss]uccessfully saved|[Ff]inished saving|"
                        r"[Ss]aving .*\b(?:done|finished|complete[d]?)\b|[Ss]ave (?:took|finished|done|complete)")
"""A line saying a save finished (Megatron ``successfully saved checkpoint``, HF ``Model weights saved in``,
Revive's example ``saved checkpoint at iteration N``)."""


def _hung_in_checkpoint_save(lines: list[str], end: int, progress: set[int]) -> str:
    """The save-start line the run went silent on: the last line of activity before ``end`` (0-based,
    exclusive) announces a checkpoint save, no training-progress line follows it and no line anywhere
    after it says the save finished. ``""`` otherwise (a save that completed, e.g. ``saved checkpoint``,
    is never read as a save hang)."""
    start = -1
    for j in range(end - 1, max(-1, end - 80), -1):
        x = lines[j][:MAX_TEXT]
        if _SAVE_DONE.search(x):
            return ""
        if _SAVE_START.search(x):
            start = j
            break
        if j in progress:
            return ""
    if start < 0:
        return ""
    if any(_SAVE_DONE.search(x[:MAX_TEXT]) for x in lines[start + 1:]):
        return ""
    return lines[start].strip()


_NET_SOCKET = re.compile(r"NET/Socket : Using")
_IFACE = re.compile(r"\[\d+\](?P<name>[\w.@-]+):(?:(?P<addr>[0-9a-fA-F:.%\w]*?)<)?")
_LINK_LOCAL = re.compile(r"^169\.254\.")
"""IPv4 link-local addresses (RFC 3927, 169.254.0.0/16: EKS Pod Identity's ``pod-id-link0``, cloud
metadata links): never routed to another host. IPv6 link-local (fe80::/10) is not counted: NCCL
connects to it with a scope id, which works between hosts on one L2 segment (shared case 013)."""
_VIRTUAL_IFACE = re.compile(r"^(?:docker\d*|br-[0-9a-f]{6,}|veth[\w@-]*|virbr\d+|cni\d*|flannel[\w.]*|cali[0-9a-f]+|"
                            r"lxcbr\d+|podman\d+|tunl\d+)$")
"""Container/virtual interfaces (docker0, docker bridges ``br-<id>``, ``veth*`` pairs, libvirt ``virbr*``,
CNI/flannel/calico, lxc, podman): host-local addresses that do not route to another host."""


def _socket_ifaces_unroutable(lines: list[str], multi_node: bool) -> str:
    """What NCCL's socket transport chose that cannot reach another host: an IPv4 link-local address it
    lists (``[1]pod-id-link0:169.254.170.23<0>``), the virtual
    interfaces it lists (``NCCL INFO NET/Socket : Using [0]bond0:… [1]br-05ab…:…``, one line or continued
    on the next lines), or only loopback in a multi-node job. ``""`` when the log shows nothing of the kind."""
    for i, x in enumerate(lines):
        if not _NET_SOCKET.search(x[:MAX_TEXT]):
            continue
        found = list(_IFACE.finditer(x[:MAX_TEXT]))
        names = [m.group("name") for m in found]
        local = [f"{m.group('name')}:{m.group('addr')}" for m in found if _LINK_LOCAL.match(m.group("addr") or "")]
        for y in lines[i + 1:i + 65]:
            y = split_prefix(y[:MAX_TEXT])[0]  # a continuation line carries the same launcher prefix
            if not re.match(r"\s*\[\d+\][\w.@-]+:", y):
                break
            more = list(_IFACE.finditer(y[:MAX_TEXT]))
            names += [m.group("name") for m in more]
            local += [f"{m.group('name')}:{m.group('addr')}" for m in more if _LINK_LOCAL.match(m.group("addr") or "")]
        virtual = [n for n in names if _VIRTUAL_IFACE.match(n)]
        if local:
            return f"NCCL's socket transport uses link-local interfaces ({', '.join(local[:3])})"
        if virtual:
            return f"NCCL's socket transport uses container/virtual interfaces ({', '.join(virtual[:3])}…)"
        if multi_node and names and all(n == "lo" for n in names):
            return "NCCL's socket transport uses only loopback (lo) in a multi-node job"
    return ""


def _preprocessing_before(lines: list[str], end: int) -> bool:
    """One of the last 5 non-empty lines before ``end`` (0-based, exclusive) is dataset preprocessing."""
    return any(_PREPROCESS.search(split_prefix(x)[0]) for x in _last_lines(lines, end, 5, 60))


def _after(e: _Ev, ref: _Ev) -> bool:
    if e.ts is not None and ref.ts is not None:
        return e.ts >= ref.ts
    return e.seq >= ref.seq


def _is_sigkill(e: _Ev) -> bool:
    f = e.m.fields
    if e.m.id == "host.killed":
        return True
    if e.m.id == "host.launcher_signal":
        return f.get("signal") == "9"  # the matcher folds signal_b/_c/_d into signal
    return e.m.id == "slurm.exit_sigkill"


_COMM_RECLAIM = re.compile(r"commReclaim: cleanup comm \S+ rank \d+ failed in destroy/abort")
"""NCCL init.cc (2.19+) ``commReclaim: cleanup comm %p rank %d failed in destroy/abort, error %d``:
a communicator's teardown (ncclCommDestroy/Abort) failed; the WARN lines just above it are that
teardown's own errors."""


_GPU_DRIVER_FRAME = re.compile(r"\[nvidia(?:_uvm|_modeset|_peermem)?\]")
_FS_FRAME = re.compile(r"\b(?:nfs\w*|rpc_\w+|lustre|ll_\w+|ptlrpc|osc_\w+|ext4_\w+|xfs_\w+|jbd2\w*|fuse_\w+|"
                       r"ceph_\w+|btrfs_\w+|ovl_\w+|gpfs|mmfs\w*|wait_on_page_bit\w*|folio_wait\w*|"
                       r"io_schedule\w*|blk_\w+)")
"""Kernel stack frames: the NVIDIA driver's modules (``[nvidia_uvm]``) and the file-system / block /
page-cache frames of a task blocked on storage (Linux 5.x-6.x, Lustre 2.x, GPFS ``mmfs``)."""


def _stack_in_gpu_driver(ctx: _Ctx, e: _Ev) -> bool:
    """The call trace that follows the hung-task line ``e`` (the next 60 lines of its kernel log, up
    to the next task report) has an NVIDIA-driver frame and no file-system frame."""
    if not e.line_no:
        return False
    key = e.source.split(":", 1)[1] if ":" in e.source else ""
    lines = ctx.bundle.kernel_logs.get(key, [])
    gpu = fs = False
    for x in lines[e.line_no:e.line_no + 60]:
        x = x[:MAX_TEXT]
        if "blocked for more than" in x or "state:D" in x:
            break
        gpu = gpu or bool(_GPU_DRIVER_FRAME.search(x))
        fs = fs or bool(_FS_FRAME.search(x))
    return gpu and not fs


def _demote_to_benign(ctx: _Ctx, e: _Ev, why: str) -> None:
    """Take root ``e`` out of the verdict (role benign) and say why in the engine notes, once."""
    e.m = e.m.model_copy(update={"role": "benign"})
    note = f"{e.m.id} on line {e.line_no} {why}"
    if note not in ctx.notes:
        ctx.notes.append(note)


def _teardown_errors(ctx: _Ctx) -> None:
    """Rule 3ap. NCCL roots printed by the same host in the 2 lines before a ``commReclaim ... failed
    in destroy/abort`` line are errors of the communicator's teardown, after its work (NVIDIA/nccl-tests#365:
    an NVLS handle already released): they become benign and say so in the engine notes. Earlier NCCL
    errors, and anything after the teardown, keep their own verdict."""
    idx = [i for i, x in enumerate(ctx.lines) if "commReclaim" in x[:MAX_TEXT] and _COMM_RECLAIM.search(x[:MAX_TEXT])]
    if not idx:
        return
    src = ctx.bundle.job_log_source
    by_line: dict[int, list[_Ev]] = {}
    for e in ctx.events:
        if e.m.role == "root" and e.m.family == "nccl" and e.source == src and e.line_no:
            by_line.setdefault(e.line_no, []).append(e)
    for t in idx:  # line t + 1 (1-based) is the teardown line: its two predecessors are t - 1 and t
        host = split_prefix(ctx.lines[t][:MAX_TEXT])[1].host
        for e in by_line.get(t - 1, []) + by_line.get(t, []):
            if e.m.role == "root" and (host is None or e.node is None or e.node == host
                                       or split_prefix(e.text)[1].host == host):
                _demote_to_benign(ctx, e, f"is the NCCL communicator's teardown failing (line {t + 1}: "
                                          "commReclaim ... failed in destroy/abort), not a fault of the run")


def _ignored_exceptions(ctx: _Ctx) -> None:
    """Rule 3as. A Python exception printed under ``Exception ignored in: <…>`` (CPython's unraisable
    hook, sys.unraisablehook: an exception in ``__del__``, a weakref callback or at interpreter exit) was
    swallowed by the interpreter - the program went on (simpletransformers#763: a DataLoader iterator's
    ``__del__`` in a forked helper): benign, named in the engine notes."""
    src = ctx.bundle.job_log_source
    for e in ctx.events:
        if not (e.m.role == "root" and e.m.family == "python" and e.source == src and e.line_no):
            continue
        for j in range(e.line_no - 2, max(-1, e.line_no - 62), -1):
            body = split_prefix(ctx.lines[j][:MAX_TEXT])[0].strip()
            if body.startswith("Exception ignored in"):
                ignored = True
            elif body.startswith("Traceback (most recent call last)"):
                k = j - 1
                while k >= 0 and not ctx.lines[k].strip():
                    k -= 1
                ignored = k >= 0 and split_prefix(ctx.lines[k][:MAX_TEXT])[0].strip().startswith("Exception ignored in")
            else:
                continue
            if ignored:
                _demote_to_benign(ctx, e, "was printed under 'Exception ignored in': the interpreter swallowed "
                                          "it and the program went on")
            break


def _apply_field_rules(ctx: _Ctx) -> None:
    """Precedence rules learnt from the field (docs/attribution.md, rules 3a-3d)."""
    _teardown_errors(ctx)
    _ignored_exceptions(ctx)
    evs = ctx.events
    xids = [(e, _xid_code(e)) for e in evs if e.m.id == "xid.event"]
    # 3a. CUDA OOM / cuDNN failures on a node whose driver logged Xid 31/43/48: the GPU's fault
    #     (a page fault or stopped channel under an allocation/cuDNN error is not the app's sizing)
    app_gpu = [e for e in evs if e.m.id in _GPU_FAULT_SIGS]
    if app_gpu:
        for e, code in xids:
            if code in _GPU_FAULT_XIDS:
                e.category = Category.gpu_memory_ecc if code == 48 else Category.gpu_hardware
                e.domain, e.tier, e.action = Domain.hardware, 1, Action.drain_and_requeue
                e.upgraded = (f"Xid {code} on this node under a CUDA memory/cuDNN error: the GPU is faulting, "
                              "not the application")
        if any(code in _GPU_FAULT_XIDS for _, code in xids):
            for e in app_gpu:
                e.tier, e.m = 6, e.m.model_copy(update={"role": "cascade"})
    # 3g. an NVSwitch SXid that raised no incident by itself (non-fatal / severity not stated) beside a
    #     job-side CUDA error of unknown cause on the node: the CUDA error is the NVLink fabric's
    sx = [e for e in evs if e.m.id == "sxid.event" and e.action != Action.drain_and_requeue]
    if sx and any(e.m.role == "root" and e.category == Category.cuda_error and e.domain == Domain.unknown
                  and not e.kernel for e in evs):
        for e in sx:
            e.m = e.m.model_copy(update={"role": "root"})
            e.category, e.domain, e.tier, e.action = Category.nvlink, Domain.unknown, 2, Action.restart_in_place
            e.upgraded = "an NVSwitch error on this node beside the job's CUDA error: the NVLink fabric"
    # 3b. Xid 94/95 (contained/uncontained ECC) right after NVLink Xids on the same node: NVLink
    nvl_nodes = {e.node for e, code in xids if code in _NVLINK_XIDS}
    for e, code in xids:
        if code in (94, 95) and e.node in nvl_nodes:
            e.category = Category.nvlink
    # 3c. a watchdog timeout (any format) on a line also matched by a c10d/NCCL error, or before
    #     every NCCL error of unknown cause (the abort that follows the timeout prints them): a hang
    wd = [e for e in evs if e.m.id in _WATCHDOG_SIGS and e.m.role == "root"]
    wd_lines = {(e.source, e.line_no) for e in wd}
    if wd_lines:
        evs = [e for e in evs if not ((e.source, e.line_no) in wd_lines and e.m.id not in _WATCHDOG_SIGS
                                      and e.category == Category.nccl_error and e.domain == Domain.unknown)]
        first_wd = min(wd, key=lambda e: (e.ts is None, e.ts or datetime.min.replace(tzinfo=UTC), e.seq))
        generic_nccl = [e for e in evs if e.m.role == "root" and e.category == Category.nccl_error
                        and e.domain == Domain.unknown and e.m.id not in _WATCHDOG_SIGS]
        if generic_nccl and all(_after(e, first_wd) for e in generic_nccl):
            for e in generic_nccl:
                e.m = e.m.model_copy(update={"role": "cascade"})
    # 3w. the watchdog lines of different ranks name different collectives (or sizes) for the same
    #     sequence number of one process group: the ranks issued mismatched collectives - a program
    #     error (rank-dependent control flow, uneven inputs), it recurs on every retry
    mismatch = _collective_mismatch(wd)
    if mismatch:
        for e in wd:
            e.category, e.domain, e.tier, e.action = Category.app_bug, Domain.application, 3, Action.stop_no_retry
            e.upgraded = mismatch
    # the first watchdog timeout's index in the job log (rules 3ao and 3n read the lines before it)
    wd_first = min(wd, key=lambda e: e.seq) if wd else None
    wd_at = (wd_first.line_no - 1 if wd_first is not None and wd_first.line_no
             and wd_first.source == ctx.bundle.job_log_source else None)
    # 3ao. the last progress before the first collective timeout is a loop that finished (a bar at
    #     100 %, N/N): this rank did all its work and then waited the whole timeout for ranks that
    #     never reached the collective - uneven work per rank (generation lengths, data shards) or a
    #     rank-dependent path: the program's, it recurs (EleutherAI/lm-evaluation-harness#1404)
    if wd_at is not None and not mismatch:
        done = _loop_finished_before(ctx.lines, wd_at)
        if done:
            for e in wd:
                e.category, e.domain, e.action = Category.hang, Domain.application, Action.stop_no_retry
                e.upgraded = (f"the last progress before the timeout is a finished loop ({done!r}): this rank "
                              "did all its work and then waited out the process-group timeout for ranks that "
                              "never reached the collective - uneven work per rank or a rank-dependent code "
                              "path, the same on every retry (balance the work, or raise the timeout)")
    # 3n. the first collectives timed out while a rank was still preprocessing its dataset: the
    #     process-group timeout is shorter than the preprocessing - the job's configuration, it recurs
    if wd_at is not None and _preprocessing_before(ctx.lines, wd_at):
        for e in wd:
            e.category, e.domain, e.action = Category.hang, Domain.application, Action.stop_no_retry
            e.upgraded = ("the collective timed out while a rank was still preprocessing its dataset: the "
                          "process-group timeout is shorter than the preprocessing (raise it, or preprocess "
                          "before the process group starts)")
    # 3d. an IB completion error that names the local HCA (NCCL 2.19+ "hca mlx5_N"): the host's link
    for e in evs:
        if e.m.id in ("nccl.ib_completion_error", "nccl.ib_retry_exceeded") and e.node and _HCA.search(e.text):
            e.domain, e.action = Domain.hardware, Action.requeue_exclude_nodes
            e.upgraded = "the error names the host's HCA: its InfiniBand link/port is at fault"
    # 3e. SIGKILL while a checkpoint/model is being loaded or saved, with no OOM line: the host OOM
    #     killer (loading and serialising both materialise the full state in host RAM)
    lines = ctx.lines
    prog = set(ctx.progress_idx)
    for e in evs:
        if e.m.role == "root" and _is_sigkill(e) and e.source == ctx.bundle.job_log_source and e.line_no:
            window = lines[max(0, e.line_no - 40):e.line_no - 1]
            pressure = _host_memory_pressure(window)
            saving = _hung_in_checkpoint_save(lines, e.line_no - 1, prog)
            if any(_CKPT_LOAD.search(x) for x in window):
                e.category, e.domain, e.tier, e.action = Category.oom_host, Domain.application, 2, Action.stop_no_retry
                e.upgraded = ("killed by SIGKILL while loading a checkpoint/model, no other error: the host's "
                              "OOM killer (every rank loading the full state into RAM)")
            elif saving:
                e.category, e.domain, e.tier, e.action = Category.oom_host, Domain.application, 2, Action.stop_no_retry
                e.upgraded = (f"killed by SIGKILL inside a checkpoint save ({saving[-80:]!r}, no 'saved' line after "
                              "it), no other error: the host's OOM killer (serialising the state copies it into "
                              "host RAM); it recurs at the next save")
            elif pressure is not None:
                e.category, e.domain, e.tier, e.action = Category.oom_host, Domain.application, 2, Action.stop_no_retry
                e.upgraded = (f"killed by SIGKILL with host memory at {pct_text(pressure)} just before: the host's "
                              "OOM killer (host RAM exhausted, e.g. by ZeRO CPU offload)")
    # 3av. a signal exit of unknown cause after the first watchdog timeout (any format): the watchdog's own
    #      abort (SIGABRT, a launcher's "return code = -6") or the launcher / shell killing what the hung job
    #      left (torch.elastic/Lightning "Forcefully terminating all other processes", the shell's "Killed"):
    #      the hang's teardown, a cascade - not a crash of its own
    if wd:
        first_wd_seq = min(e.seq for e in wd)
        for e in evs:
            if (e.m.role == "root" and (_is_sigkill(e) or e.m.id == "host.launcher_signal")
                    and e.category == Category.crash
                    and e.domain == Domain.unknown and e.seq > first_wd_seq):
                e.m = e.m.model_copy(update={"role": "cascade"})
    # 3aw. srun's "task N: Killed" after another task already exited non-zero ("task M: Exited with exit
    #      code K"): srun killing the step's remaining tasks (Slurm's kill-on-bad-exit / "Job step
    #      aborted") - the teardown of the first task's failure, not a SIGKILL of its own
    exited = [e for e in evs if e.m.id == "srun.task_exited" and e.source == ctx.bundle.job_log_source]
    if exited:
        for e in evs:
            task = e.m.fields.get("task")
            if (e.m.id == "host.killed" and e.m.role == "root" and task and e.category == Category.crash
                    and e.domain == Domain.unknown
                    and any(x.seq < e.seq and x.m.fields.get("task") != task for x in exited)):
                e.m = e.m.model_copy(update={"role": "cascade"})
    # 3af. a hang whose last activity is a checkpoint-save line with no "saved" line after it: the save
    #     path itself deadlocked (a collective inside the distributed save, a writer thread): the
    #     application's hang, it recurs at the next save - stop (a hang after a completed save is not this)
    for e in evs:
        if (e.m.role == "root" and e.category == Category.hang and e.domain != Domain.hardware
                and e.source == ctx.bundle.job_log_source and e.line_no):
            save = _hung_in_checkpoint_save(lines, e.line_no - 1, prog)
            if save:
                e.domain, e.action = Domain.application, Action.stop_no_retry
                e.upgraded = (f"the run hung inside a checkpoint save ({save[-80:]!r}, no 'saved' line after it): "
                              "the save path deadlocked - the application's hang, it recurs at the next save")
    # 3ag. NCCL's socket transport chose interfaces that do not route between the hosts (docker/bridge/veth,
    #     or only loopback in a multi-node job) beside an NCCL system/socket error of unknown cause: the
    #     nodes' network configuration (NCCL_SOCKET_IFNAME) - it recurs on every retry until it is set
    if any(e.m.role == "root" and e.category == Category.nccl_error and e.domain == Domain.unknown for e in evs):
        multi = len(ctx.bundle.job.nodes) > 1 if ctx.bundle.job else False
        why = _socket_ifaces_unroutable(lines, multi)
        if why:
            for e in evs:
                if e.m.role == "root" and e.category == Category.nccl_error and e.domain == Domain.unknown:
                    e.domain, e.action = Domain.system, Action.stop_no_retry
                    e.upgraded = (f"{why}: addresses that do not reach the other hosts - the nodes' network "
                                  "configuration (set NCCL_SOCKET_IFNAME); it recurs on a retry")
    # 3au. no GPU visible to a job that asked its scheduler for GPUs: the site's device binding (cgroup
    #      ConstrainDevices, CUDA_VISIBLE_DEVICES against the container's /dev/nvidia*), not the job's
    #      script (NVIDIA/pyxis#47) - the same on every retry until the site's configuration changes
    nodev = [e for e in evs if e.m.id == "cuda.no_visible_device" and e.m.role == "root"]
    if nodev and any(_GPU_REQUEST.search(x[:MAX_TEXT]) for x in ctx.lines[:400]):
        for e in nodev:
            e.category, e.domain, e.action = Category.cuda_error, Domain.system, Action.stop_no_retry
            e.upgraded = ("the job asked the scheduler for GPUs and its process sees none (or not the one it was "
                          "given): the site's GPU binding (cgroup devices, CUDA_VISIBLE_DEVICES against the "
                          "container's /dev/nvidia*), not the job's script")
    # 3aq. a task in D state whose kernel stack is inside the NVIDIA driver (nvidia / nvidia_uvm frames)
    #      and no file system: the process is stuck in the GPU driver, not on storage - a hang of that
    #      node (reboot it before it takes jobs); why the driver lock was held is not in the evidence
    for e in evs:
        if e.m.id == "storage.hung_task" and e.m.role == "root" and e.kernel and e.line_no:
            if _stack_in_gpu_driver(ctx, e):
                e.category, e.domain, e.action = Category.hang, Domain.unknown, Action.requeue_exclude_nodes
                e.upgraded = ("the blocked task's kernel stack is inside the NVIDIA driver (nvidia/nvidia_uvm "
                              "frames, no file-system frame): the process is stuck in the GPU driver on that "
                              "node, not on storage - requeue without the node (it needs a reboot)")
    # 3i. a hang whose last activity was loading/downloading a checkpoint: the storage stalled
    for e in evs:
        if e.m.role == "root" and e.category == Category.hang and e.source == ctx.bundle.job_log_source and e.line_no:
            if _stalled_on_checkpoint_io(lines, e.line_no - 1):
                e.category, e.domain, e.action = Category.io_error, Domain.system, Action.restart_in_place
                e.upgraded = "the run stalled while reading/downloading its checkpoint: a storage/transfer stall"
    # 3h. evidence of a node-local system cause (ACS/IOMMU redirecting P2P) beside a hang or an NCCL
    #     error of unknown cause: the node's configuration is at fault (system), requeue without it
    hints = [e for e in evs if e.m.id in _SYSTEM_HINTS]
    if hints:
        explains = {Category.hang, Category.nccl_error}
        if all(h.m.id in _HANG_ONLY_HINTS for h in hints):
            explains = {Category.hang}
        if any(h.m.id in _DMA_FAULT_HINTS for h in hints):
            explains.add(Category.cuda_error)
        for e in evs:
            if (e.m.role == "root" and e.category in explains
                    and e.domain == Domain.unknown):
                e.domain, e.action = Domain.system, Action.requeue_exclude_nodes
                e.node = e.node or hints[0].node
                e.upgraded = f"the node reports {hints[0].text.strip()[:80]!r}: peer-to-peer traffic is blocked there"
    # 3p. a JAX coordination-service barrier that timed out: what it means depends on which barrier
    #     and which tasks it names (the task lines that follow it)
    for e in evs:
        if e.m.id == "jax.barrier_timeout" and e.m.role == "root":
            _jax_barrier_verdict(ctx, e, lines)
    # 3q. an allocator OOM on the host (TensorFlow's ``device:CPU:N by allocator cpu``): host RAM, not GPU
    for e in evs:
        if e.m.id == "cuda.oom" and _HOST_ALLOCATOR.search(e.text[:MAX_TEXT]):
            e.category, e.domain, e.action = Category.oom_host, Domain.application, Action.stop_no_retry
            e.upgraded = "the allocation that failed was on the host (CPU allocator): host RAM is exhausted, not GPU memory"
    # 3z. NCCL reports that a CUDA or verbs call it made was rejected as invalid (a caller error): the
    #     library/stack versions or the program passed what the driver refuses - it recurs on a retry
    #     (an ibv_modify_qp refused as EINVAL is this too, not the RDMA addressing its signature assumes)
    def _z(e: _Ev) -> bool:
        return e.m.role == "root" and e.category == Category.nccl_error and (
            e.domain == Domain.unknown or e.m.id == "nccl.ibv_modify_qp_failed")
    if any(_z(e) for e in evs):
        bad = next((x for x in lines if "NCCL WARN" in x and _NCCL_CALLER_ERROR.search(x[:MAX_TEXT])), "")
        if bad:
            for e in evs:
                if _z(e):
                    e.domain, e.action = Domain.application, Action.stop_no_retry
                    e.upgraded = (f"NCCL reports a call rejected as invalid ({bad.strip()[-90:]!r}): a caller error of "
                                  "the software stack (NCCL/PyTorch versions or the program), not a transient fault; "
                                  "it recurs on a retry")
    # 3aa. NCCL telling a rank that a peer exited (``ncclRemoteError``, "remote process exited") beside a
    #     Python exception another rank raised: that exception is the first failure, the NCCL error
    #     its echo on the survivors (hardware evidence still outranks both by tier)
    _peer_exit_cascade(evs)
    # 3ad. a Python exception that the previous attempt already raised, word for word: not transient
    _repeated_exception(ctx, evs)
    # 3y. a generic Python exception whose type and message name no infrastructure is the program's own
    #     error (catalog ``program_error``): it recurs on every retry
    for e in evs:
        if e.m.id == "py.exception_generic" and e.m.role == "root" and _program_error(ctx.matcher, e):
            e.category, e.domain, e.action = Category.app_bug, Domain.application, Action.stop_no_retry
            e.upgraded = ("a Python exception raised by the program (its type and message name no network, "
                          "GPU, storage, memory or process fault): the job's own error, it recurs on a retry")
    ctx.events = evs


_NCCL_CALLER_ERROR = re.compile(
    r"Cuda failure (?:\d+ )?'(?:invalid argument|invalid resource handle|invalid device function|invalid device pointer|"
    r"invalid value)'|Call to ibv_\w+ failed with error Invalid argument")
"""A CUDA or verbs call NCCL made, rejected as the caller's error (NCCL ``NCCL WARN Cuda failure 'E'`` /
``Call to ibv_X failed with error E``, NCCL 2.x). CUDA Runtime API cudaError_t (CUDA 12.x):
cudaErrorInvalidValue (1, "one or more of the parameters passed to the API call is not within an
acceptable range"), cudaErrorInvalidDevicePointer (17), cudaErrorInvalidDeviceFunction (98, "not
compiled for the proper device architecture"), cudaErrorInvalidResourceHandle (400, "a resource handle
passed to the API call was not valid"); ibv_modify_qp(3) etc. EINVAL ("invalid value provided in attr").
Only applied to NCCL errors of unknown cause: an NVLS setup failure keeps its own (system) verdict."""


_PEER_EXIT_SIGS = frozenset({"nccl.remote_error"})
"""NCCL results that report a peer's exit, not a fault of their own: ``ncclRemoteError`` ("A call failed
possibly due to a network error or a remote process exiting prematurely", nccl.h, NCCL 2.12-2.23) and
PyTorch's rendering of it ("remote process exited or there was a network error", ProcessGroupNCCL,
torch 2.x)."""
_DIST_WORDS = ("nccl", "processgroup", "distributed", "c10d", "gloo")


def _peer_exit_cascade(evs: list[_Ev]) -> None:
    """Rule 3aa: demote peer-exit NCCL roots (and the other NCCL/c10d roots on their lines) to
    cascades when another rank raised a Python exception.

    The exception must be a job-log root of the ``python`` family whose line names no distributed
    layer (``DistBackendError: NCCL error ...`` is the NCCL error itself) and, when both carry a rank,
    come from a rank other than every peer-exit line's. Kernel (hardware) events are untouched."""
    peer = [e for e in evs if e.m.role == "root" and e.m.id in _PEER_EXIT_SIGS and e.domain == Domain.unknown]
    if not peer:
        return
    peer_lines = {(e.source, e.line_no) for e in peer}
    peer_ranks = {e.rank for e in peer if e.rank is not None}
    exc = [e for e in evs if e.m.role == "root" and e.m.family == "python" and not e.kernel
           and (e.source, e.line_no) not in peer_lines
           and not any(w in e.text[:MAX_TEXT].lower() for w in _DIST_WORDS)
           and (e.rank is None or e.rank not in peer_ranks)]
    if not exc:
        return
    first = min(exc, key=lambda e: e.seq)
    # the same line's other NCCL/c10d roots (``DistBackendError: NCCL error ... remote process exited``)
    echo = [e for e in evs if e.m.role == "root" and e.domain == Domain.unknown and not e.kernel
            and (e.source, e.line_no) in peer_lines and e.m.family != "python"]
    for e in echo:
        e.tier, e.m = max(e.tier, 9), e.m.model_copy(update={"role": "cascade"})
        e.upgraded = (f"a peer exited ({first.text.strip()[:80]!r} was raised first): the NCCL error is the "
                      "survivors' echo of that exit, not a fault of its own")


_INFRA_EXC_TYPES = ("oserror", "ioerror", "connection", "timeout", "brokenpipe", "memoryerror", "signal",
                    "interrupt", "ncclerror", "cudaerror", "disterror", "distbackend", "diststore", "distnetwork",
                    "rendezvous", "childfailed", "watchdog", "outofmemory")
"""Exception types whose repeat may still be the machine's (a node that keeps failing the same way):
rule 3ad leaves them to their own rules and to node history."""


def _repeated_exception(ctx: _Ctx, evs: list[_Ev]) -> None:
    """Rule 3ad: a crash-of-unknown-cause Python exception raised again after a restart is the program's.

    ``ctx.prev_attempt`` holds the previous attempt's lines (``=== attempt restart=N`` markers). A
    job-log root of the ``python`` family, domain unknown, whose exception line (prefix stripped:
    rank, time) appears verbatim in that attempt, and whose type is not in ``_INFRA_EXC_TYPES``, becomes
    ``app_bug`` / application / ``stop_no_retry``: the same inputs raised it twice."""
    if not ctx.prev_attempt:
        return
    cand = [e for e in evs if e.m.role == "root" and e.m.family == "python" and e.domain == Domain.unknown
            and not e.kernel and not any(t in (e.m.fields.get("exc_type") or "").lower() for t in _INFRA_EXC_TYPES)]
    if not cand:
        return
    before = {split_prefix(x[:MAX_TEXT])[0].strip() for x in ctx.prev_attempt if "Error" in x or "Exception" in x}
    for e in cand:
        body = split_prefix(e.text[:MAX_TEXT])[0].strip()
        if body and body in before:
            e.category, e.domain, e.action = Category.app_bug, Domain.application, Action.stop_no_retry
            e.upgraded = (f"the previous attempt raised the same exception ({body[:80]!r}): it recurs on a "
                          "restart, so it is the program's (or its inputs'), not a transient fault")


_TENSOR_DEVICE_TOKENS = re.compile(
    r"(?i)torch\.cuda\.\w*Tensor|\bdevice\(type='cuda'[^)]*\)|\bdevice='cuda(?::\d+)?'|\bcuda:\d+\b|\bon device cuda\b")
"""Tensor type and device names in torch's own type/device checks ("Input type (torch.cuda.HalfTensor)
and weight type (torch.cuda.FloatTensor) should be the same", "found at least two devices, cuda:0 and
cpu"; torch 1.x-2.x ATen messages): they name where a tensor lives, not a CUDA fault, so they are
removed before the ``program_error`` words are looked for."""
_EXCLUDE_WORD_RE: dict[tuple[str, ...], re.Pattern[str]] = {}


def _exclude_words_re(words: tuple[str, ...]) -> re.Pattern[str]:
    """One regex for the catalog's exclude words, each anchored at a word start (``store`` is not
    ``restore``, ``host`` is not ``ghost``); a word may still run on (``hostname``, ``nodes``)."""
    r = _EXCLUDE_WORD_RE.get(words)
    if r is None:
        r = re.compile("|".join(r"(?<![a-z0-9])" + re.escape(w) for w in words))
        _EXCLUDE_WORD_RE[words] = r
    return r


def _program_error(matcher: Matcher, e: _Ev) -> bool:
    """True when the generic exception ``e`` (fields ``exc_type``, ``message``) is the program's own.

    The catalog's ``program_error.exclude_types`` / ``exclude_words`` (lower-case substrings of the
    type and of the message) mark infrastructure faults; its ``program_phrases`` (torch's and
    Python's own texts for a misuse that happen to hold such a word) mark the program's error
    whatever the type; an empty message decides nothing."""
    exc = (e.m.fields.get("exc_type") or "").lower()
    msg = (e.m.fields.get("message") or "").strip().lower()[:MAX_TEXT]
    types = getattr(matcher, "program_error_types", ())
    words = getattr(matcher, "program_error_words", ())
    if not exc or not msg or not (types or words):
        return False
    if any(p in msg for p in getattr(matcher, "program_error_phrases", ())):
        return True
    msg = _TENSOR_DEVICE_TOKENS.sub(" ", msg)
    return not any(t in exc for t in types) and not (words and _exclude_words_re(tuple(words)).search(msg))


_PG_ID = re.compile(r"\bPG (?:ID )?(?P<pg>\d+)\b|\bprocess group (?P<pg_b>\d+)\b")
_P2P_OPS = ("SEND", "RECV")


def _collective_mismatch(wd: list[_Ev]) -> str:
    """Why the watchdog timeouts show mismatched collectives, or "".

    ``wd``: watchdog root events; those with ``seqnum`` and ``op_type`` fields (ProcessGroupNCCL's
    ``WorkNCCL(SeqNum=N, OpType=OP, NumelIn=K, ...)``, torch 1.13-2.x) are grouped by process group
    (``PG ID n`` / ``PG n`` when the line names it) and sequence number. Two ranks whose work at the
    same slot differs in ``OpType`` (point-to-point ops excluded: their numbering is per pair), or in
    ``NumelIn`` for the same op, called different collectives: the job's own error."""
    slots: dict[tuple[str, str], dict[int, tuple[str, str]]] = {}
    for e in wd:
        seq, op = e.m.fields.get("seqnum"), (e.m.fields.get("op_type") or "").upper()
        if not seq or not op or e.rank is None or any(p in op for p in _P2P_OPS):
            continue
        pg = _PG_ID.search(e.text[:MAX_TEXT])
        key = ((pg.group("pg") or pg.group("pg_b") or "") if pg else "", seq)
        slots.setdefault(key, {})[e.rank] = (op, e.m.fields.get("numel_in") or "")
    for (_pg, seq), by_rank in sorted(slots.items()):
        ops = {op for op, _ in by_rank.values()}
        if len(ops) > 1:
            shown = ", ".join(f"rank {r} {op}" for r, (op, _) in sorted(by_rank.items())[:4])
            return (f"the ranks timed out in different collectives at sequence number {seq} ({shown}): mismatched "
                    "collectives, a program error that recurs on every retry")
        numels = {n for _, n in by_rank.values() if n}
        if len(numels) > 1:
            shown = ", ".join(f"rank {r} NumelIn={n}" for r, (_, n) in sorted(by_rank.items())[:4] if n)
            return (f"the ranks timed out in {next(iter(ops))} at sequence number {seq} with different sizes "
                    f"({shown}): mismatched collectives, a program error that recurs on every retry")
    return ""


_HOST_ALLOCATOR = re.compile(r"/device:CPU:\d+ by allocator (?:cpu|mklcpu)\b|on (?:host|CPU) by allocator cpu\b")
"""TensorFlow's allocation-failure text names the device and allocator (tensorflow/core/framework/
allocator / BFC allocator, TF 1.x-2.x: ``OOM when allocating tensor with shape[…] … on
/job:…/device:CPU:0 by allocator cpu``): a CPU device means host memory ran out."""

_JAX_TASK_LINE = re.compile(r"^\s*/job:[\w-]+/replica:\d+/task:(?P<task>\d+)\s*$")
_JAX_TASKS_IN_TEXT = re.compile(r"/job:[\w-]+/replica:\d+/task:(?P<task>\d+)")
_JAX_CONNECT_BARRIERS = ("PjRT_Client_Connect", "RegisterTask", "connect")
"""Start-up barriers of ``jax.distributed.initialize`` (XLA pjrt/distributed/client.cc: every process
connects through the ``PjRT_Client_Connect`` barrier; older versions register with RegisterTask)."""
MAX_JAX_TASK_LINES = 4096


def _jax_barrier_tasks(e: _Ev, lines: list[str]) -> set[int]:
    """Task ids a JAX barrier timeout lists: the ``/job:…/task:N`` lines right after it (jax >= 0.4.14
    prints one per missing task), else the ids quoted on the line itself (the gRPC message)."""
    tasks: set[int] = set()
    if e.line_no:
        for x in lines[e.line_no:e.line_no + MAX_JAX_TASK_LINES]:
            m = _JAX_TASK_LINE.match(split_prefix(x[:MAX_TEXT])[0])
            if not m:
                break
            task = log_int(m.group("task"))
            if task is not None:
                tasks.add(task)
    if not tasks:
        after = e.text.split("Barrier timed out", 1)[-1]
        tasks = {t for m in _JAX_TASKS_IN_TEXT.finditer(after[:MAX_TEXT]) if (t := log_int(m.group("task"))) is not None}
    return tasks


def _jax_barrier_verdict(ctx: _Ctx, e: _Ev, lines: list[str]) -> None:
    """Rule 3p (docs/attribution.md). Shutdown barrier → a task did not finish (a hang; at the end of a
    finished run, the teardown's). The start-up connect barrier naming every task but task 0 → only
    process 0 was ever started: the launch configuration (the same on every retry). Any other barrier
    → the named tasks never arrived (died or were never launched): restart; one task named is its rank."""
    barrier = e.m.fields.get("barrier") or e.m.fields.get("shutdown") or ""
    tasks = _jax_barrier_tasks(e, lines if e.source == ctx.bundle.job_log_source else [])
    if barrier.startswith("Shutdown"):
        if _training_finished(ctx):
            e.category, e.domain, e.action = Category.hang, Domain.application, Action.stop_no_retry
            e.upgraded = ("the JAX shutdown barrier timed out after training had finished: a task hung on exit "
                          "(teardown); a requeue would only hang again")
        else:
            e.category, e.domain, e.action = Category.hang, Domain.unknown, Action.restart_in_place
            e.upgraded = "the JAX shutdown barrier timed out: at least one task did not finish (hung or too slow)"
        return
    if (any(b in barrier for b in _JAX_CONNECT_BARRIERS) and len(tasks) >= 2 and 0 not in tasks
            and tasks == set(range(1, max(tasks) + 1))):
        e.category, e.domain, e.action = Category.app_bug, Domain.application, Action.stop_no_retry
        e.upgraded = (f"the start-up barrier timed out waiting for every other task (1-{max(tasks)}): only process 0 "
                      "was started - the launch configuration (num_processes vs processes launched); it fails the "
                      "same way on every retry")
        return
    if len(tasks) == 1 and e.rank is None:
        e.rank = next(iter(tasks))
    if tasks:
        e.upgraded = (f"task(s) {sorted(tasks)[:8]} never reached the JAX barrier {barrier or '?'}: they died or were "
                      "never launched")


NODE_HISTORY_WINDOW = timedelta(days=30)
"""How far back an earlier hardware incident on a node still counts as evidence (issue #8.4).
Revive's own choice, not a vendor figure: NVIDIA's field guidance is that a GPU that faulted once
(Xid 48/79/94/95/119) tends to fault again within days to weeks of the first event, before an RMA."""
_HISTORY_HW_CATEGORIES = {Category.gpu_hardware, Category.gpu_memory_ecc, Category.nvlink}


def _hardware_history(ctx: _Ctx, node: str, ref: datetime | None) -> PriorIncident | None:
    """The most recent earlier hardware incident on ``node`` within ``NODE_HISTORY_WINDOW`` of
    ``ref`` (an entry without a time counts; one after ``ref`` is not earlier and is ignored)."""
    best: PriorIncident | None = None
    for p in ctx.bundle.node_history.get(node, []):
        if p.domain != Domain.hardware and p.category not in _HISTORY_HW_CATEGORIES:
            continue
        if p.at is not None and ref is not None:
            at = p.at if p.at.tzinfo else p.at.replace(tzinfo=UTC)
            if at > ref or ref - at > NODE_HISTORY_WINDOW:
                continue
        if best is None or (p.at is not None and (best.at is None or p.at > best.at)):
            best = p
    return best


def _apply_node_history(ctx: _Ctx) -> None:
    """3j. An ambiguous CUDA error (category ``cuda_error``, domain not settled) on a node that had an
    earlier hardware incident is that node's hardware: domain hardware, the node named, drain. When
    the error names no node, the job's only node with such a history is named."""
    hist = ctx.bundle.node_history
    if not hist:
        return
    layout = _rank_layout(ctx)
    nodes = _nodes(ctx.bundle)
    trig_at = ctx.bundle.trigger.at if ctx.bundle.trigger else None
    for e in ctx.events:
        if e.m.role != "root" or e.category != Category.cuda_error or e.domain == Domain.application:
            continue
        ref = e.ts if (e.ts is not None and e.ts_exact) else (trig_at or e.ts)
        node = _ev_node(e, layout, nodes)
        if not node:
            # the error names no node: one (and only one) of the job's nodes with a recent hardware
            # incident is the one to suspect
            suspects = [n for n in nodes if _hardware_history(ctx, n, ref) is not None]
            if len(suspects) != 1:
                continue
            node = suspects[0]
        prior = _hardware_history(ctx, node, ref)
        if prior is None:
            continue
        e.node, e.domain, e.action = node, Domain.hardware, Action.drain_and_requeue
        e.tier = min(e.tier, 2)
        when = prior.at.date().isoformat() if prior.at else "time unknown"
        ident = f"{prior.incident_id}, " if prior.incident_id else ""
        why = f": {prior.reason}" if prior.reason else ""
        e.upgraded = (f"{node} had an earlier hardware incident ({ident}{prior.category.value}, {when}{why}): "
                      "a CUDA error of unknown cause on that node is its GPU failing again")



_TPN = [
    re.compile(r"SLURM_(?:N)?TASKS_PER_NODE=(?P<n>\d+)"),
    re.compile(r"--ntasks-per-node[= ](?P<n>\d+)"),
    re.compile(r"--nproc[_-]per[_-]node[= ](?P<n>\d+)"),
    re.compile(r"nproc_per_node\W{1,3}(?P<n>\d+)"),
]
_WORLD = [
    re.compile(r"\bnranks (?P<n>\d+)\b"),
    re.compile(r"[Ww]orld[ _][Ss]ize\W{1,3}(?P<n>\d+)"),
    re.compile(r"WORLD_SIZE=(?P<n>\d+)"),
]
_NODELIST = re.compile(r"SLURM_(?:JOB_)?NODELIST=(?P<v>\S+)")


_GPUS_PER_NODE = re.compile(r"(?:^|[,:/])gpu(?::[\w.-]+)?:(?P<n>\d+)\b")
"""GPUs per node in Slurm's TresPerNode (``gres:gpu:8``, ``gres/gpu:8``, ``gres:gpu:h100:8``; Slurm
22.05-24.x scontrol/slurmrestd ``tres_per_node``)."""


def _tasks_per_node_from_record(ctx: _Ctx, n_nodes: int) -> int | None:
    """Ranks per node from the Slurm record when the log printed no layout: ``NumTasks`` / nodes when
    srun started one task per rank; with one task per node (a torchrun/launcher per node), the GPUs
    per node (``TresPerNode``) when the log names a rank at or above the task count (the launcher
    spawned one process per GPU). None when the record does not say."""
    job = ctx.bundle.job
    if job is None or not n_nodes or not job.num_tasks or job.num_tasks < n_nodes:
        return None
    if job.num_tasks > n_nodes:
        return job.num_tasks // n_nodes if job.num_tasks % n_nodes == 0 else None
    g = _GPUS_PER_NODE.search(job.tres_per_node or "")
    gpus = log_int(g.group("n")) if g else None
    ranks = [e.rank for e in ctx.events if e.rank is not None]
    if gpus and gpus > 1 and ranks and max(ranks) >= n_nodes:
        return gpus
    return None


def _rank_layout(ctx: _Ctx) -> dict[int, str]:
    """Global rank -> node, from the job's layout: SLURM_NODELIST order (or the Slurm record's node
    list) and tasks per node (SLURM_TASKS_PER_NODE, --ntasks-per-node, torchrun --nproc-per-node,
    world size / nodes, or the Slurm record's NumTasks / TresPerNode), block distribution as srun and
    torchrun use by default. Ranks a line ties to a host (``[rank N host H]``, NCCL prefixes,
    torchrun ``host :`` lines) override the layout."""
    b = ctx.bundle
    head = b.job_log[:400000]
    nodes = _nodes(b)
    m = _NODELIST.search(head)
    if m:
        from revive.attribution.cases import expand_nodelist  # noqa: PLC0415  (no I/O: a pure parser)

        listed = expand_nodelist(m.group("v"))
        if listed:
            nodes = listed
    out: dict[int, str] = {}
    if nodes:
        tpn = None
        for pat in _TPN:
            t = pat.search(head)
            n = log_int(t.group("n")) if t else None
            if n:
                tpn = n
                break
        if tpn is None:
            for pat in _WORLD:
                w = pat.search(head)
                world = log_int(w.group("n")) if w else None
                if world is not None and world >= len(nodes) and world % len(nodes) == 0:
                    tpn = world // len(nodes)
                    break
        if tpn is None:
            tpn = _tasks_per_node_from_record(ctx, len(nodes))
        if tpn:
            for r in range(min(len(nodes) * tpn, 100000)):
                out[r] = nodes[r // tpn]
    out.update(ctx.rank_host)
    return out


_NCCL_HOST_PREFIX = re.compile(r"(?m)(?:^|[\s\]>:])(?P<host>[A-Za-z0-9][\w.-]*):\d+:\d+ \[\d+\] (?:[\w./-]+:\d+ )?"
                               r"NCCL (?:INFO|WARN|ERROR|TRACE|ABORT)\b")
"""NCCL's own line prefix ``<hostname>:<pid>:<tid> [<cudaDev>] [file:line ]NCCL INFO|WARN …`` (NCCL
src/debug.cc ``ncclDebugLog``, 2.x), wherever the line sits after a launcher's or a timestamp's prefix."""
MAX_NCCL_PREFIX_SCAN = 5000


def _single_nccl_host(text: str, nodes: list[str]) -> str | None:
    """The one host that NCCL's line prefixes name in ``text`` (None when none, or two or more, are named;
    with a known node list the host must be one of the job's nodes). Scans at most
    ``MAX_NCCL_PREFIX_SCAN`` prefixes."""
    if not text or "NCCL " not in text:
        return None
    seen: str | None = None
    for k, m in enumerate(_NCCL_HOST_PREFIX.finditer(text)):
        if k >= MAX_NCCL_PREFIX_SCAN:
            break
        h = _norm_host(m.group("host"), nodes)
        if h is None or h.isdigit():
            continue
        if seen is None:
            seen = h
        elif h != seen:
            return None
    if seen is not None and nodes and seen not in nodes:
        return None
    return seen


_LOG_HOST = re.compile(
    r"(?<![-\w.])(?:[Hh]ost(?:[Nn]ame)?|HOSTNAME)\b\s*[:=]?\s*(?P<h>[A-Za-z][\w-]*\d[\w.-]*[\w]|\d{1,3}(?:\.\d{1,3}){3})\b"
    r"|^srun: error: (?P<s>[A-Za-z][\w.-]*): tasks? \d"
    r"|\b(?:[Ss]cheduled|[Rr]unning|[Ll]aunched|[Ss]tarted|[Aa]llocated) on (?:host |node )?(?P<o>[A-Za-z][\w-]*\d[\w.-]*[\w])\b")
"""A line that names the host it ran on: ``Hostname gpu-node-001`` / ``hostname: …`` / ``host=…`` banners
(training scripts, launchers), torch.distributed.elastic's ChildFailedError table (``host      : <name>``,
torch/distributed/elastic/multiprocessing/errors/error_handler.py, 1.9-2.x), srun's
``srun: error: <node>: task N: Exited`` (Slurm src/srun/srun_job.c, 20.x-23.x) and a scheduler's or
script's ``scheduled|running|launched|started|allocated on [host |node ]<name>``. A host name must contain a
digit (``host memory`` is not a host) or be an IPv4 address other than a bind-all or loopback one;
a command-line flag (``--host 0.0.0.0``) is not a banner."""
MAX_LOG_HOST_LINES = 20000


def _single_log_host(ctx: _Ctx) -> str | None:
    """The one host a log without a node list ran on: the host its NCCL prefixes (``_NCCL_HOST_PREFIX``)
    and its host-naming lines (``_LOG_HOST``) all name. ``None`` when the bundle has a node list (that is
    the truth), when no line names a host, or when two or more hosts are named (a multi-node job: no
    single place). Reads the first ``MAX_LOG_HOST_LINES`` lines only, each cut at ``MAX_TEXT``."""
    if _nodes(ctx.bundle):
        return None
    seen: set[str] = set()
    for line in ctx.lines[:MAX_LOG_HOST_LINES]:
        if "NCCL " in line:
            found = [m.group("host") for m in _NCCL_HOST_PREFIX.finditer(line[:MAX_TEXT])]
        elif "ost" in line or "OST" in line or " on " in line or line.startswith("srun: error"):
            found = [m.group("h") or m.group("s") or m.group("o") for m in _LOG_HOST.finditer(line[:MAX_TEXT])]
        else:
            continue
        for raw in found:
            h = _norm_host(raw, [])
            if h and not h.isdigit() and h != "0.0.0.0" and not h.startswith("127."):
                seen.add(h)
        if len(seen) > 1:
            return None
    return next(iter(seen)) if len(seen) == 1 else None


def _ev_node(ev: _Ev, layout: dict[int, str], nodes: list[str]) -> str | None:
    if ev.node:
        return ev.node
    if ev.rank is not None and ev.rank in layout:
        return layout[ev.rank]
    if len(nodes) == 1:
        return nodes[0]
    return None


_FINAL_ITER = re.compile(r"(?:iteration|step|Step|Iteration|global_step)\s*:?\s*(?P<i>\d+)\s*/\s*(?P<n>\d+)")
_DONE = re.compile(r"after training is done|[Tt]raining (?:completed|complete|finished|done)\b|Trainer\.fit. stopped: .max_(?:steps|epochs)")


_INIT_LINE = re.compile(
    r"[Ii]nitializing (?:ddp|distributed): GLOBAL_RANK: (?P<g>\d+), MEMBER: (?P<m>\d+)/(?P<n>\d+)"
    r"|store_based_barrier|[Ww]aiting in store based barrier|init_process_group|_configure_distributed_model"
    r"|deepspeed/__init__\.py|[Ii]nitializing (?:torch\.)?distributed|jax\.distributed\.initialize|"
    r"NCCL INFO (?:Bootstrap|NET/|Using network|cudaDriverVersion|comm 0x|Channel \d+|Trees \[|Connected all (?:rings|trees)"
    r"|Setting affinity for GPU)"
    r"|All (?:DDP|distributed) processes registered\. Starting (?:ddp )?with \d+ processes"
    r"|\[engine\.py:\d+:_configure_\w+\]|\[comm\.py:\d+:init_distributed\]|init nccl context nranks: \d+"
    r"|^#\s+size\s+count\s+type\s+redop\b")
"""Lines of a distributed start-up: Lightning's ``initializing ddp: GLOBAL_RANK: g, MEMBER: m/N``
(pytorch_lightning 1.x ``DDPPlugin.init_ddp_connection``; ``Initializing distributed:`` in 2.x
``lightning.fabric.utilities.distributed``), torch's store-based barrier and ``init_process_group``
(torch.distributed.distributed_c10d, 1.x-2.x), DeepSpeed's engine set-up frames
(``deepspeed/__init__.py initialize`` → ``_configure_distributed_model``, 0.8-0.14) and its log lines
(``[engine.py:N:_configure_optimizer]`` from ``DeepSpeedEngine.__init__``, ``[comm.py:N:init_distributed]``
from deepspeed/comm/comm.py), Lightning's ``All DDP processes registered. Starting ddp with N
processes`` (1.x; ``All distributed processes registered. Starting with N processes`` in 2.x: the
process group exists, the first collective has not run), JAX's ``jax.distributed.initialize``, PaddlePaddle's ``init nccl context nranks: N local rank: R gpu id: G
ring id: I`` (paddle/fluid/imperative/nccl_context.cc, Paddle 2.x),
NCCL's communicator init INFO lines (NCCL 2.x init.cc / transport.cc: bootstrap, network, affinity,
``Channel NN``, ``Trees [...]``, ``Connected all rings|trees``, ``comm 0x... Init COMPLETE``) and nccl-tests'/rccl-tests' column header (``#  size
count type redop ...``, printed right before the first timed collective; a result row follows each
size, so a log that ends at the header never finished one)."""
INIT_TAIL_LINES = 30


def _stuck_in_init(ctx: _Ctx, ended_by: str = "The time limit") -> tuple[str, tuple[Domain, Action]] | None:
    """Rule 3al. The attempt's last ``INIT_TAIL_LINES`` non-empty lines before Slurm's time-limit line
    hold distributed start-up lines (``_INIT_LINE``) and the attempt printed no progress: why, and
    (domain, action). Lightning's membership lines decide the domain: a GLOBAL_RANK claimed twice, or
    only rank 0 of N ever starting, is the launch configuration (Slurm tasks per node against the
    trainer's devices / num_nodes; Lightning-AI/pytorch-lightning#14078) - the same on every retry."""
    lines = ctx.lines
    end = next((i for i in range(len(lines) - 1, -1, -1) if "DUE TO TIME LIMIT" in lines[i][:MAX_TEXT]), len(lines))
    tail = [x for x in lines[max(0, end - 400):end] if x.strip()][-INIT_TAIL_LINES:]
    hits = [m for x in tail if (m := _INIT_LINE.search(split_prefix(x[:MAX_TEXT])[0]))]
    if not hits:
        return None
    members = [(g, n) for m in hits if m.group("g") is not None
               and (g := log_int(m.group("g"))) is not None and (n := log_int(m.group("n"))) is not None]
    why = (f"{ended_by} ended an attempt that never reached a first training step; its log ends in the "
           "distributed start-up: the start-up hung.")
    if members:
        ranks = [g for g, _ in members]
        world = max(n for _, n in members)
        if len(ranks) != len(set(ranks)):
            return (why + f" Lightning started GLOBAL_RANK {sorted({g for g in ranks if ranks.count(g) > 1})[:4]} "
                    "twice: the Slurm tasks do not match the trainer's devices / num_nodes (launch configuration); "
                    "it hangs the same way on every retry.", (Domain.application, Action.stop_no_retry))
        if world >= 2 and set(ranks) == {0}:
            return (why + f" Only rank 0 of {world} ever started: the other processes were never launched "
                    "(Slurm tasks against the trainer's devices / num_nodes); it hangs the same way on every "
                    "retry.", (Domain.application, Action.stop_no_retry))
    return why + " Restart in place; if it recurs, collect py-spy stacks.", (Domain.unknown, Action.restart_in_place)


_EXT_BUILD = re.compile(r"as PyTorch extensions root\.\.\.|Building extension module \w+|Loading extension module \w+"
                        r"|build and load the \w+ kernel during runtime|Emitting ninja build file")
"""A JIT C++/CUDA extension build (torch.utils.cpp_extension ``load``, 1.x-2.x: ``Using <dir> as PyTorch
extensions root...``, ``Emitting ninja build file``, ``Building extension module <name>...``, ``Loading
extension module <name>...``; DeepSpeed op_builder and ColossalAI ``No pre-built kernel is found, build
and load the <name> kernel during runtime now`` print these). The build is serialised by a lock file in
the extensions root (torch/utils/file_baton.py ``FileBaton.wait`` polls it with no timeout): a lock
left by a killed build makes every later run wait forever (OpenRLHF/OpenRLHF#208,
hpcaitech/ColossalAI#3359)."""
EXT_BUILD_TAIL_LINES = 6
"""How many of the attempt's last non-empty lines (before Slurm's teardown lines) rule 3ay reads."""
_EXT_BUILD_WHY = ("{ended} ended an attempt whose log stops in a JIT extension build ({line!r}) with no "
                  "progress after it: the build waited on its lock (a stale lock file in the extensions root, "
                  "left by a killed build, is waited on forever). It waits again on every retry: stop; remove "
                  "the lock in the extensions root (TORCH_EXTENSIONS_DIR) or prebuild the ops.")


def _stuck_in_extension_build(ctx: _Ctx) -> str:
    """Rule 3ay. The attempt's last ``EXT_BUILD_TAIL_LINES`` non-empty lines, before Slurm's teardown
    lines, hold a JIT extension build line (``_EXT_BUILD``) and no progress line follows it: the
    quoted line, else ``""``."""
    lines = ctx.lines
    tail: list[tuple[int, str]] = []
    for i in range(len(lines) - 1, max(-1, len(lines) - 400), -1):
        x = lines[i][:MAX_TEXT]
        if not x.strip() or any(t in x for t in _STEP_TEARDOWN) or "DUE TO TIME LIMIT" in x:
            continue
        tail.append((i, x))
        if len(tail) >= EXT_BUILD_TAIL_LINES:
            break
    progress = set(ctx.progress_idx)
    for i, x in tail:  # newest first
        if i in progress:
            return ""
        if _EXT_BUILD.search(x):
            return x.strip()[:160]
    return ""


def _training_finished(ctx: _Ctx) -> bool:
    """The log shows the last iteration of the run (``iteration N/N``) or a framework's
    end-of-training line."""
    lines = ctx.lines
    for i in reversed(ctx.progress_idx[-5:]):
        m = _FINAL_ITER.search(lines[i][:MAX_TEXT])
        n, it = (log_int(m.group("n")), log_int(m.group("i"))) if m else (None, None)
        if n and it is not None and it >= n:
            return True
    return any(_DONE.search(x) for x in lines[-50:])



def _order_key(ev: _Ev):
    # the driver's own verdict (Xid/SXid) outranks a job-side restatement of the same fault
    authoritative = ev.m.id in ("xid.event", "sxid.event")
    severity = 0 if (authoritative and ev.action == Action.drain_and_requeue) else 1
    return (ev.tier, not authoritative, severity, ev.ts is None, ev.ts or datetime.min.replace(tzinfo=UTC), ev.seq)




def _completed_job(ctx: _Ctx, roots: list[_Ev]) -> str:
    """``"job 42 ended COMPLETED with exit code 0:0"`` when the scheduler record says the job succeeded
    and every root is a survivable job-log line, else ``""``. Slurm's COMPLETED with exit code 0:0
    means every step exited 0 (sacct(1) JOB STATE CODES, Slurm 22.05): NCCL's error trace at
    teardown (an-020), Ray's "marked dead" warnings of workers that came back (ray-project/ray#15128)
    did not stop the run. Hardware-domain and kernel roots keep their incident (the node still needs
    care after a good run), so do NaN losses (a result) and Slurm's own task-failure lines in the log
    (sacct can say COMPLETED for a step whose task failed, l-016)."""
    job = ctx.bundle.job
    if not job or not roots or job.state != JobState.COMPLETED or not exit_code_zero(job.exit_code):
        return ""
    if not survivable(ctx, roots) or any(e.m.id.startswith(("slurm.", "srun.")) for e in roots):
        return ""
    return f"job {job.job_id} ended COMPLETED with exit code {job.exit_code or '0:0'}"


UNEXPLAINED_FAILURE = "slurm.state_failed"
"""Root signature id of rule 3ax's verdict: the scheduler says the job failed and nothing explains it."""


def _scheduler_failed(bundle: EvidenceBundle) -> str:
    """``"job 42 state=FAILED exit_code=1:0"`` when the scheduler record (or the job-state trigger) says
    the job ended FAILED with a non-zero exit code, else ``""``. Slurm's ``exit_code`` is
    ``"<code>:<signal>"`` (sacct ExitCode); a record without one is not taken as a failure."""
    trig = bundle.trigger
    if trig and trig.kind == TriggerKind.job_state and (trig.state_to or "").upper().startswith("FAILED"):
        return f"job state {trig.state_from or '?'} -> {trig.state_to}"
    job = bundle.job
    if not job or job.state != JobState.FAILED or not job.exit_code or exit_code_zero(job.exit_code):
        return ""
    return f"job {job.job_id} state={job.state} exit_code={job.exit_code}"


def _guard(a: Attribution, matcher: Matcher) -> Attribution:
    """Calibrate the confidence (catalog table fitted on outcomes) and apply the policy floor:
    below ``MIN_CONFIDENCE`` a verdict never drains a node — it requeues without the named node(s),
    or escalates to a person when none is named."""
    raw = a.confidence
    conf = round(apply_calibration(getattr(matcher, "calibration", None), raw), 2)
    a.confidence = conf
    if conf < MIN_CONFIDENCE and a.action == Action.drain_and_requeue:
        if a.culprit_nodes:
            a.action = Action.requeue_exclude_nodes
            a.explanation += (f" Confidence {conf:.2f} is below the policy minimum {MIN_CONFIDENCE}: no drain; "
                              "requeue without the named node(s) instead.")
        else:
            a.action = Action.escalate
            a.explanation += (f" Confidence {conf:.2f} is below the policy minimum {MIN_CONFIDENCE} and no node "
                              "is named: escalate to a person instead of draining.")
    return a


def _verdict(bundle: EvidenceBundle, matcher: Matcher) -> Attribution:
    """The whole pipeline without the guard (collect → rules → decide)."""
    ctx = _Ctx(bundle=bundle, matcher=matcher, ref_year=_ref_year(bundle))
    _collect_job_log(ctx)
    _collect_kernel(ctx)
    _synthetic(ctx)
    _apply_rules(ctx)
    return _decide(ctx)


def _apply_rules(ctx: _Ctx) -> None:
    _apply_hardware_typical(ctx)
    _apply_comm_library_segfault(ctx)
    _apply_field_rules(ctx)
    _apply_node_history(ctx)


def _decide(ctx: _Ctx) -> Attribution:
    """Root vs cascade, culprits, action and explanation from the collected, rule-adjusted events."""
    bundle = ctx.bundle
    nodes = _nodes(bundle)
    layout = _rank_layout(ctx)
    # where a node is placed: the job's nodes, or for a log without a node list the one host it names
    only_host = _single_log_host(ctx)
    place = nodes or ([only_host] if only_host else [])

    # kernel events from before this attempt started belong to an earlier incident. Syslog stamps
    # carry neither year nor zone: with the nodes' UTC offset known (bundle.kernel_log_utc_offset_s)
    # they are exact; without it, only drop those more than a day older.
    attempt_start = ctx.attempt_start
    if attempt_start is not None:
        def _old(e: _Ev) -> bool:
            # exact stamps: allow 10 s of clock skew between nodes (NTP keeps them well under that;
            # syslog has 1 s resolution)
            slack = timedelta(seconds=10) if e.ts_exact else timedelta(hours=26)
            # (a difference, not attempt_start - slack: that overflows for a stamp of 0001-01-01)
            return e.kernel and e.ts is not None and attempt_start - e.ts > slack
        ctx.events = [e for e in ctx.events if not _old(e)]

    node_notes: list[str] = []
    for e in ctx.events:
        if e.m.role == "benign" and e.m.note and e.m.fields.get("effective_xid") != "45":
            where = e.node or "unknown node"
            code = e.m.fields.get("xid") or e.m.fields.get("sxid")
            note = f"{where}: {'Xid' if e.m.id == 'xid.event' else 'SXid'} {code} on {e.m.fields.get('pci', '?')}: {e.m.note}"
            if note not in node_notes:
                node_notes.append(note)
    events = [e for e in ctx.events if e.m.role != "benign"]
    roots = sorted((e for e in events if e.m.role == "root"), key=_order_key)
    cascades_all = sorted((e for e in events if e.m.role == "cascade"), key=_order_key)
    trig = bundle.trigger

    def cite(exclude: _Ev | None) -> list[Event]:
        rest = sorted((e for e in events if e is not exclude), key=lambda e: (e.ts is None, e.ts or datetime.min.replace(tzinfo=UTC), e.seq))
        out, seen = [], set()
        for e in rest:
            k = (e.source, e.line_no)
            if k in seen:
                continue
            seen.add(k)
            out.append(e.event())
            if len(out) >= MAX_CASCADES:
                break
        return out

    # ---- no root at all
    if not roots:
        if trig and trig.kind == TriggerKind.no_progress:
            since = trig.since.isoformat() if trig.since else "?"
            ev = Event(source="monitor", timestamp=trig.at,
                       text=f"no progress since {since} (threshold {trig.threshold_s}s)", signature_id="monitor.no_progress")
            return Attribution(category=Category.hang, domain=Domain.unknown, confidence=0.6, root_event=ev,
                               cascade_events=cite(None), action=Action.restart_in_place, node_notes=node_notes,
                               explanation=f"The job stopped making progress (no progress line since {since}) and no "
                                           "error explains it: a hang of unknown cause. Restart in place.")
        hints = [c for c in cascades_all if c.m.id in _SYSTEM_HINTS]
        silent = _silent_hang(ctx) if len(hints) == len(cascades_all) else ""
        if silent:
            ln = (ctx.progress_idx[-1] + 1) if ctx.progress_idx else None
            ev = Event(source=bundle.job_log_source, line_no=ln, text=cap_line(ctx.lines[ln - 1]) if ln else "",
                       signature_id="engine.silent_hang")
            hint_nodes = sorted({n for h in hints if (n := _ev_node(h, layout, place))})
            if hints:
                return Attribution(category=Category.hang, domain=Domain.system, confidence=_conf("engine.silent_hang", 0.5),
                                   root_event=ev, cascade_events=cite(None), node_notes=node_notes,
                                   culprit_nodes=hint_nodes,
                                   action=Action.requeue_exclude_nodes if hint_nodes else Action.restart_in_place,
                                   explanation=f"Silent hang: {silent}; the node reports "
                                               f"{hints[0].text.strip()[:80]!r} (ACS/IOMMU redirect GPU peer-to-peer "
                                               "traffic and stall NCCL): a node configuration fault. Requeue without it.")
            log_lines = ctx.lines
            if _stalled_on_checkpoint_io(log_lines, len(log_lines)):
                return Attribution(category=Category.io_error, domain=Domain.system,
                                   confidence=_conf("engine.silent_hang", 0.5), root_event=ev,
                                   cascade_events=cite(None), action=Action.restart_in_place, node_notes=node_notes,
                                   explanation=f"Silent stall: {silent}, while the run was reading/downloading its "
                                               "checkpoint: a storage/transfer stall. Restart in place.")
            if save := _hung_in_checkpoint_save(log_lines, len(log_lines), set(ctx.progress_idx)):
                # 3af. went silent inside a checkpoint save (no "saved" line after it): the save path's hang
                return Attribution(category=Category.hang, domain=Domain.application,
                                   confidence=_conf("engine.silent_hang", 0.5), root_event=ev,
                                   cascade_events=cite(None), action=Action.stop_no_retry, node_notes=node_notes,
                                   explanation=f"Silent hang: {silent}, right after {save[-80:]!r} with no 'saved' "
                                               "line after it: the checkpoint save itself hung (a deadlock in the "
                                               "save path); it recurs at the next save. Stop; collect py-spy stacks.")
            if again := _prev_attempt_stalled(ctx):
                # 3ae. the restart already hung the same way: the program's (or its stack's) hang
                return Attribution(category=Category.hang, domain=Domain.application,
                                   confidence=_conf("engine.silent_hang", 0.5), root_event=ev,
                                   cascade_events=cite(None), action=Action.stop_no_retry, node_notes=node_notes,
                                   explanation=f"Silent hang: {silent}; {again}: a hang that recurs after a restart "
                                               "is not transient. Stop; collect py-spy stacks.")
            return Attribution(category=Category.hang, domain=Domain.application, confidence=_conf("engine.silent_hang", 0.5),
                               root_event=ev, cascade_events=cite(None), action=Action.restart_in_place,
                               node_notes=node_notes,
                               explanation=f"Silent hang: {silent}. Restart in place; if it recurs at the same "
                                           "point, it is the application's (collect py-spy stacks).")
        # 3at. cancelled by a person (not at its time limit) while still in the distributed start-up, never
        #      having trained: the start-up hung (LLaMA-Factory#3534: every communicator "Init COMPLETE", then nothing)
        state = ended_state(ctx)
        if state.startswith("CANCELLED") and not cascades_all and (build := _stuck_in_extension_build(ctx)):
            return Attribution(category=Category.hang, domain=Domain.system, confidence=_conf("engine.silent_hang", 0.5),
                               action=Action.stop_no_retry, node_notes=node_notes,
                               explanation=_EXT_BUILD_WHY.format(ended="A cancellation", line=build))
        if (state.startswith("CANCELLED") and ctx.first_progress_seq is None and len(hints) == len(cascades_all)
                and not any("DUE TO TIME LIMIT" in x[:MAX_TEXT] for x in ctx.lines[-50:])
                and (init := _stuck_in_init(ctx, ended_by="A cancellation"))):
            dom_i, act_i = init[1]
            if hints:
                # the node reports a setting that stalls GPU peer-to-peer traffic (ACS, IOMMU): the node's
                hint_nodes = sorted({n for h in hints if (n := _ev_node(h, layout, place))})
                return Attribution(category=Category.hang, domain=Domain.system,
                                   confidence=_conf("engine.silent_hang", 0.5), node_notes=node_notes,
                                   culprit_nodes=hint_nodes,
                                   action=Action.requeue_exclude_nodes if hint_nodes else Action.stop_no_retry,
                                   explanation=init[0] + f" The node reports {split_prefix(hints[0].text)[0].strip()[:100]!r}: a node "
                                               "setting that stalls GPU peer-to-peer traffic. Requeue without it.")
            return Attribution(category=Category.hang, domain=dom_i, confidence=_conf("engine.silent_hang", 0.5),
                               action=act_i, node_notes=node_notes, explanation=init[0])
        cascades_all = [c for c in cascades_all if c.m.id not in _SYSTEM_HINTS]
        is_strag, why, first_seq = _straggler(ctx)
        if is_strag:
            root_ev = None
            if first_seq is not None and first_seq in ctx.progress_lines:
                ln, txt, ts = ctx.progress_lines[first_seq]
                root_ev = Event(source=bundle.job_log_source, line_no=ln, timestamp=ts, text=txt,
                                signature_id="engine.throughput_drop")
            slow, slow_why = _slow_nodes(bundle)
            if not slow:
                slow, slow_why = _slow_hosts_from_compute(bundle)
            if not slow and len(place) == 1:
                # one node ran the whole job: a sustained slowdown of its own is that node's
                slow, slow_why = list(place), f" The job ran on one node, {place[0]}: the slowdown is its own."
            tail = (slow_why + " Requeue without them." if slow else
                    " No node is named yet: find it from per-node evidence and requeue without it.")
            return Attribution(category=Category.straggler, domain=Domain.hardware, confidence=0.7 if slow else 0.6,
                               root_event=root_ev, culprit_nodes=slow,
                               action=Action.requeue_exclude_nodes, node_notes=node_notes,
                               cascade_events=cite(None),
                               explanation=f"Throughput dropped and stayed down: {why}, with no restart. Typical of a "
                                           f"slow node.{tail}")
        if cascades_all:
            c = sorted(cascades_all, key=_order_key)[0]
            # a scheduler fact (the allocation ended on time / was preempted) keeps its system domain
            c_dom = c.domain if c.category in (Category.timeout, Category.preempted) else Domain.unknown
            return Attribution(category=c.category, domain=c_dom, confidence=0.3, root_event=c.event(),
                               cascade_events=cite(c), action=Action.restart_in_place, node_notes=node_notes,
                               culprit_ranks=[c.rank] if c.rank is not None else [],
                               explanation=f"Only secondary errors were found (first: {c.m.id}); the initiating event "
                                           "is not in the evidence. Restart in place.")
        note = f" Notes: {'; '.join(bundle.notes)}" if bundle.notes else ""
        # 3ax. the scheduler says the job failed (FAILED with a non-zero exit code) and nothing in the
        #      evidence explains it: an unexplained failure, never "healthy" (al-005 prolog failure,
        #      af-008 a Neuron collective error the catalog did not know before 2026.12.14)
        if failed := _scheduler_failed(bundle):
            ev = Event(source="slurm", text=failed, signature_id=UNEXPLAINED_FAILURE)
            return Attribution(category=Category.crash, domain=Domain.unknown, confidence=0.3, root_event=ev,
                               action=Action.restart_in_place, node_notes=node_notes,
                               explanation=f"The scheduler reports the job failed ({failed}) but no failure "
                                           "signature in the evidence explains it: an unexplained failure. Restart "
                                           "in place; if it fails again the same way, it is deterministic." + note)
        return Attribution(category=Category.none, domain=Domain.unknown, confidence=0.8 if not bundle.notes else 0.4,
                           action=Action.none, node_notes=node_notes,
                           explanation="No failure signature found: the run looks healthy." + note)

    # ---- pick the root
    root = roots[0]
    recovered = _recovered(ctx, roots)
    if not recovered and (ok := _completed_job(ctx, roots)):
        return Attribution(category=Category.none, domain=Domain.unknown, confidence=0.5, action=Action.none,
                           cascade_events=cite(None), node_notes=node_notes,
                           explanation=f"Errors were printed (first: {root.m.id}, line {root.line_no}) but {ok}: "
                                       "the run survived them, no incident.")
    if recovered:
        return Attribution(category=Category.none, domain=Domain.unknown, confidence=0.5, action=Action.none,
                           cascade_events=cite(None), node_notes=node_notes,
                           explanation=f"Errors were printed (first: {root.m.id}, line {root.line_no}) but training "
                                       f"kept making progress after the last of them ({recovered} progress lines "
                                       "later) and the job has not failed: no incident.")
    cat, dom, act, tier = root.category, root.domain, root.action, root.tier
    sig = root.m
    teardown = ""
    if cat == Category.timeout and _training_finished(ctx):
        # the time limit killed a job that had already finished training: a teardown hang
        # (exit barrier, un-joined workers); a requeue would only hang again
        cat, dom, act = Category.hang, Domain.application, Action.stop_no_retry
        teardown = (" Training had already reached its last iteration before the time limit: the processes "
                    "hung on exit (teardown), not a wall-time problem.")
    elif cat == Category.timeout and (stalled := _silent_hang(ctx)):
        # the time limit only ended a run that had already stopped progressing: a silent hang
        cat, dom, act = Category.hang, Domain.application, Action.restart_in_place
        teardown = (f" Before the time limit the run had hung: {stalled}. The time limit ended a hang; restart "
                    "in place, and if it recurs at the same point it is the application's (collect py-spy stacks).")
    elif cat == Category.timeout and (build := _stuck_in_extension_build(ctx)):
        # rule 3ay: the time limit ended a run waiting in a JIT extension build (a stale build lock)
        cat, dom, act = Category.hang, Domain.system, Action.stop_no_retry
        teardown = " " + _EXT_BUILD_WHY.format(ended="The time limit", line=build)
    elif cat == Category.timeout and ctx.first_progress_seq is None and (init := _stuck_in_init(ctx)):
        # rule 3al: the whole time limit went by before a first training step, the log ending in the
        # distributed start-up: the start-up hung (a wall-time problem would have trained first)
        cat, (dom, act), teardown = Category.hang, init[1], " " + init[0]

    # same-tier hardware conflict: different nodes with different hardware faults → keep all nodes
    culprit_nodes: list[str] = []
    extra = ""
    hw_node_events: list[_Ev] = []
    if cat == Category.node_failure:
        keepalive = {_norm_host(e.m.fields.get("host"), nodes) for e in roots if e.m.id == "torchelastic.keepalive_failed"}
        for e in roots:
            if e.m.id == "torchelastic.keepalive_failed" and len(keepalive) > 1:
                continue  # several nodes lost the rendezvous: the store's side, not theirs
            if e.category == Category.node_failure and e.m.id in _NODE_FAILURE_HOST_SIGS:
                h = _norm_host(e.m.fields.get("host"), nodes)
            elif e.m.id == "slurm.batch_script_missing":
                h = nodes[0] if nodes else None  # the batch step runs on the allocation's first node
            elif e.category == Category.node_failure and e.kernel:
                h = e.node  # a node's own kernel line (panic, fatal machine check): that node
            else:
                continue
            if h and h not in culprit_nodes:
                culprit_nodes.append(h)
        for n, st in bundle.node_states.items():
            s = st.upper()
            if ("DOWN" in s or "FAIL" in s) and (not nodes or n in nodes) and n not in culprit_nodes:
                culprit_nodes.append(n)
        if not culprit_nodes and len(place) == 1 and not any(e.m.id == "torchelastic.keepalive_failed" for e in roots):
            # the job ran on one node: the node that failed is that one
            culprit_nodes.append(place[0])
            extra += f" The job ran on one node, {place[0]}: the node failure is that node's."
        # a failing part (uncorrected host-memory error, a node's broken Slurm spool) is drained; a node
        # that stopped is run around. The domain is the root's when it says system or unknown (a node's
        # software state, a node that dropped out for no stated reason), else the node's hardware.
        dom = dom if dom in (Domain.system, Domain.unknown) else Domain.hardware
        act = Action.drain_and_requeue if act == Action.drain_and_requeue else Action.requeue_exclude_nodes
    elif dom == Domain.hardware:
        hw_node_events = [e for e in roots if e.domain == Domain.hardware and e.tier <= tier
                          and (e.category in _HW_CATEGORIES | {Category.straggler} or e.m.id == sig.id)]
        for e in hw_node_events:
            node = _ev_node(e, layout, place)
            if node and node not in culprit_nodes:
                culprit_nodes.append(node)
        if not culprit_nodes and cat in _HW_CATEGORIES:
            # the Slurm record: a job node the scheduler already marked down/drained/failing
            for n, st in bundle.node_states.items():
                s_up = st.upper()
                if any(w in s_up for w in ("DOWN", "FAIL", "DRAIN")) and (not nodes or n in nodes) and n not in culprit_nodes:
                    culprit_nodes.append(n)
            if culprit_nodes:
                extra += f" Slurm reports {', '.join(culprit_nodes)} down/drained: the fault is placed there."
    elif (dom == Domain.system and act in (Action.requeue_exclude_nodes, Action.drain_and_requeue)) or (
            cat in (Category.nvlink, Category.gpu_hardware, Category.gpu_memory_ecc)) or sig.id in _AVOID_NODE_SIGS or (
            root.kernel and act == Action.requeue_exclude_nodes):
        # node-local system faults (memlock limit, /dev/shm, fabric manager, ACS/IOMMU, a wedged
        # mount), NVLink/GPU faults of unproven severity and a node's own kernel line that says run
        # elsewhere (a task stuck in the GPU driver): the node is where it happened
        for e in roots:
            if e.m.id == sig.id or e is root:
                node = _ev_node(e, layout, place)
                if node and node not in culprit_nodes:
                    culprit_nodes.append(node)
        if not culprit_nodes:
            # the error line names no host: the one host the job's NCCL lines name is where it ran
            only = _single_nccl_host(bundle.job_log, nodes)
            if only:
                culprit_nodes.append(only)
                extra += f" The job's NCCL lines name one host, {only}: the fault is placed there."
    elif sig.id == "nccl.ib_completion_error":
        ip = sig.fields.get("peer_ip")
        if ip and ip in bundle.ip_to_node:
            culprit_nodes = [bundle.ip_to_node[ip]]
            act = Action.requeue_exclude_nodes
            extra = f" The peer {ip} maps to {culprit_nodes[0]} in the cluster config; requeue without it."

    # no_progress trigger with only a watchdog hang: still a hang
    if trig and trig.kind == TriggerKind.no_progress and cat == Category.hang:
        act = Action.restart_in_place

    # ---- culprit ranks (root event only; the same signature restated may carry the rank)
    culprit_ranks: list[int] = []
    if dom != Domain.system and cat not in (Category.node_failure, Category.timeout, Category.preempted,
                                            Category.app_bug, Category.io_error):
        if root.rank is not None:
            culprit_ranks = [root.rank]
        else:
            same = {e.rank for e in events if e.m.id == sig.id and e.rank is not None}
            if len(same) == 1:
                culprit_ranks = sorted(same)
    if cat == Category.hang:
        lc: dict[int, int] = {}
        for e in events:
            if e.m.id == "nccl.watchdog_progress" and e.rank is not None:
                try:
                    lc[e.rank] = int(e.m.fields.get("last_completed", ""))
                except ValueError:
                    pass
        if len(set(lc.values())) > 1:
            low = min(lc.values())
            culprit_ranks = sorted(r for r, v in lc.items() if v == low)
            extra += (f" Rank(s) {culprit_ranks} completed fewer collectives (last completed work {low}) than the "
                      "others: they are the ones absent from the collective.")
        else:
            culprit_ranks = []

    # ---- guards
    if dom != Domain.hardware and act == Action.drain_and_requeue and not (
            sig.id in _SYSTEM_DRAIN and culprit_nodes):
        act = Action.restart_in_place
    # a node-local fault (hardware, or the node's own software state: fabric manager, driver, container
    # runtime) keeps 'run elsewhere' with no node named: the plan finds the node or restarts in place
    if (act == Action.requeue_exclude_nodes and not culprit_nodes and cat != Category.straggler
            and dom not in (Domain.hardware, Domain.system)):
        act = Action.restart_in_place
    if cat == Category.straggler:
        act = Action.requeue_exclude_nodes
    escalation = ""
    if sig.fields.get("resolution") == "contact_support":
        escalation = " NVIDIA's resolution is 'contact support': drain the node and escalate to a person."

    # conflicting deciders at the same tier: different categories and different actions
    same_tier = [e for e in roots if e.tier == tier and e.category != cat and e.action != act
                 and e.domain not in (Domain.unknown,) and dom != Domain.unknown]
    confidence = _CONFIDENCE.get(tier, 0.4)
    if same_tier:
        confidence = max(0.2, confidence - 0.3)
        extra += f" Conflicting evidence at the same level: {same_tier[0].m.id} ({same_tier[0].category.value})."
    if dom == Domain.hardware and not culprit_nodes and cat in _HW_CATEGORIES:
        confidence = min(confidence, 0.6)
        extra += " The node is not named in the evidence: identify it from per-node logs before acting."
    if dom == Domain.unknown:
        confidence = min(confidence, 0.5)

    # ---- explanation
    where = ""
    if root.node:
        where += f" on {root.node}"
    if root.rank is not None:
        where += f" (rank {root.rank})"
    detail = ""
    if sig.id == "xid.event":
        detail = (f" Xid {sig.fields.get('xid')} ({sig.fields.get('xid_name', '')}); NVIDIA resolution: "
                  f"{sig.fields.get('resolution', '').replace('_', ' ')}.")
        if sig.note:
            detail += f" {sig.note}."
    elif sig.id.startswith("py.") or sig.id.startswith("cuda.") or sig.id.startswith("storage."):
        exc = sig.fields.get("exc_type")
        if exc:
            detail = f" Exception {exc}."
        detail += _explain_frame(ctx.lines, bundle, root)
    if root.upgraded:
        detail += f" {root.upgraded}."
    n_casc = len(events) - 1
    explanation = (f"{cat.value} ({dom.value}): {sig.id}{where} — {root.text.strip()[:200]}.{detail}"
                   f"{teardown}{extra}{escalation}"
                   + (f" {n_casc} other event(s) cited as cascade." if n_casc > 0 else "")
                   + f" Recommended: {act.value}.")

    gpus = _gpus(ctx, hw_node_events or [root]) if dom == Domain.hardware else []
    return Attribution(category=cat, domain=dom, culprit_nodes=culprit_nodes, culprit_ranks=culprit_ranks,
                       gpus=gpus, confidence=round(confidence, 2), root_event=root.event(),
                       cascade_events=cite(root), action=act, explanation=explanation.strip(),
                       node_notes=node_notes)

