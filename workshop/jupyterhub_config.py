"""JupyterHub for a gputrain-kit workshop on one shared (GPU) server: `jupyterhub -f jupyterhub_config.py`.

One single-user JupyterLab per attendee, each with its own GPU (round-robin) and a memory cap, the kit installed
once for everyone. workshop/README.md says how to install and start it; docs/instructors.md has the sizing.
Every setting is in the block below; each can also be given as an environment variable WORKSHOP_<NAME>
(`WORKSHOP_ATTENDEES_PER_GPU=2 jupyterhub -f ...`), which is how `make workshop-check` runs this very file.
"""
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

c = get_config()  # noqa: F821 (JupyterHub's config loader defines get_config)


def setting(name, default):
    return os.environ.get("WORKSHOP_" + name, default)


# ---------------------------------------------------------------------------------------------------------------
# Settings: everything an instructor changes.
# ---------------------------------------------------------------------------------------------------------------
# Where the hub listens. Loopback by default (reach it through `ssh -L 8000:127.0.0.1:8000 server`). For the
# room, serve TLS: BIND_URL "https://:443" with SSL_CERT and SSL_KEY (e.g. Let's Encrypt's fullchain.pem and
# privkey.pem). Plain http on a non-loopback address is refused unless PLAIN_HTTP_OK is "1" (only behind a
# reverse proxy that terminates TLS itself).
BIND_URL = setting("BIND_URL", "http://127.0.0.1:8000")
SSL_CERT = setting("SSL_CERT", "")
SSL_KEY = setting("SSL_KEY", "")
PLAIN_HTTP_OK = setting("PLAIN_HTTP_OK", "0") == "1"

# Who logs in. "native": attendees sign up at /hub/signup with their own password and wait until an admin
# approves them at /hub/authorize (no outside service, no GitHub account needed). "github": GitHub OAuth for
# the members of GITHUB_ORG or the GITHUB_USERS named (needs an OAuth app: OAUTH_CLIENT_ID, OAUTH_CLIENT_SECRET
# and OAUTH_CALLBACK_URL=https://HOST/hub/oauth_callback in the hub's environment).
AUTHENTICATOR = setting("AUTHENTICATOR", "native")
ADMINS = {name for name in setting("ADMINS", "instructor").split(",") if name}
GITHUB_ORG = setting("GITHUB_ORG", "")
GITHUB_USERS = {name for name in setting("GITHUB_USERS", "").split(",") if name}

# The kit, installed once for everyone (`make install` in a clone at /opt/gputrain-kit): every attendee's
# kernel runs this Python. The notebooks are copied into each attendee's ~/COURSE_FOLDER on their first start.
KIT_PYTHON = setting("KIT_PYTHON", "/opt/gputrain-kit/.venv/bin/python")
COURSE_FOLDER = setting("COURSE_FOLDER", "gputrain-course")

# GPUs. "auto": the GPUs `nvidia-smi -L` lists (none on a CPU-only server); or a count ("8"); or the
# CUDA_VISIBLE_DEVICES values to hand out, comma-separated ("0,1,2,3", or MIG UUIDs). Attendees get them
# round-robin in the order they first start a server, and keep theirs.
GPUS = setting("GPUS", "auto")
ATTENDEES_PER_GPU = int(setting("ATTENDEES_PER_GPU", "4"))
# Memory of one GPU in MB: "auto" reads the smallest from nvidia-smi. Each attendee gets
# (GPU_MEMORY_MB / ATTENDEES_PER_GPU - GPU_RESERVE_MB) for TensorFlow, split into SETUP_DEVICES logical GPUs:
# GPUTRAIN_MEMORY_LIMIT_MB in the attendee's environment is what to pass to kit.setup(memory_limit_mb=...).
GPU_MEMORY_MB = setting("GPU_MEMORY_MB", "auto")
GPU_RESERVE_MB = int(setting("GPU_RESERVE_MB", "1024"))  # CUDA context, cuDNN/cuBLAS workspaces: outside the cap
SETUP_DEVICES = int(setting("SETUP_DEVICES", "4"))  # the notebooks' kit.setup(devices=4)
# Memory and cores per attendee (server, kernels and their child processes together), enforced by
# SystemdSpawner (systemd's MemoryMax= and CPUQuota=). One notebook needs up to 1.4 GB with its child
# processes on the CPU (docs/performance.md); 4G leaves room for a second open kernel.
MEM_LIMIT = setting("MEM_LIMIT", "4G")
CPU_LIMIT = float(setting("CPU_LIMIT", "2"))

# The hub's database, cookie secret, GPU assignments and the shared kernel spec (root-only, except the spec).
STATE_DIR = Path(setting("STATE_DIR", "/srv/jupyterhub"))
# configurable-http-proxy (npm): a path, or a name on PATH.
PROXY = setting("PROXY", "configurable-http-proxy")

# ---------------------------------------------------------------------------------------------------------------
# Listening, TLS, state
# ---------------------------------------------------------------------------------------------------------------
STATE_DIR.mkdir(parents=True, exist_ok=True)
os.chmod(STATE_DIR, 0o755)
c.JupyterHub.bind_url = BIND_URL
c.JupyterHub.hub_bind_url = "http://127.0.0.1:8081"  # the hub's own API: loopback only
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:8001"
c.ConfigurableHTTPProxy.command = [shutil.which(PROXY) or PROXY]
c.ConfigurableHTTPProxy.pid_file = str(STATE_DIR / "proxy.pid")
c.JupyterHub.db_url = f"sqlite:///{STATE_DIR / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE_DIR / "jupyterhub_cookie_secret")
if SSL_CERT or SSL_KEY:
    if not (SSL_CERT and SSL_KEY and BIND_URL.startswith("https://")):
        raise ValueError("TLS needs WORKSHOP_SSL_CERT, WORKSHOP_SSL_KEY and an https:// WORKSHOP_BIND_URL together")
    c.JupyterHub.ssl_cert = SSL_CERT
    c.JupyterHub.ssl_key = SSL_KEY
elif BIND_URL.startswith("https://"):
    raise ValueError(f"WORKSHOP_BIND_URL={BIND_URL} needs WORKSHOP_SSL_CERT and WORKSHOP_SSL_KEY")
else:
    host = BIND_URL.split("://", 1)[1].rsplit(":", 1)[0].strip("[]")
    if host not in ("127.0.0.1", "localhost", "::1") and not PLAIN_HTTP_OK:
        raise ValueError(f"WORKSHOP_BIND_URL={BIND_URL} serves passwords in plain http beyond this machine: "
                         "use https with WORKSHOP_SSL_CERT/WORKSHOP_SSL_KEY, or WORKSHOP_PLAIN_HTTP_OK=1 "
                         "behind a reverse proxy that terminates TLS")

# ---------------------------------------------------------------------------------------------------------------
# Authentication
# ---------------------------------------------------------------------------------------------------------------
c.Authenticator.admin_users = ADMINS
if AUTHENTICATOR == "native":
    # Sign up at /hub/signup; an admin approves each account at /hub/authorize. The admins named in ADMINS are
    # approved at sign-up: sign up as the instructor right after the first start, before sharing the URL.
    c.JupyterHub.authenticator_class = "native"
    c.NativeAuthenticator.open_signup = False
    c.NativeAuthenticator.minimum_password_length = 10
    c.NativeAuthenticator.check_common_password = True
    c.NativeAuthenticator.allowed_failed_logins = 5
    c.NativeAuthenticator.seconds_before_next_try = 120
    c.NativeAuthenticator.allow_all = True  # whoever an admin approved; unapproved sign-ups cannot log in

    # NativeAuthenticator 1.3.0 (the latest release) times each login with the hub's statsd client
    # (`self.statsd.timer("login.authenticate")` in its LoginHandler.post); JupyterHub 6 removed statsd, so without
    # this every password login at /hub/login fails with HTTP 500 ("'LoginHandler' object has no attribute
    # 'statsd'"): nobody could log in. A timer that does nothing, only where the hub has no statsd of its own.
    # `make workshop-check` logs every attendee in through /hub/login and fails if a login fails.
    from nativeauthenticator import handlers as _native_handlers

    class _NoStatsd:
        def timer(self, name):
            return self

        def start(self):
            return self

        def stop(self, send=True):
            return None

    if not hasattr(_native_handlers.LoginHandler, "statsd"):
        _native_handlers.LoginHandler.statsd = _NoStatsd()
elif AUTHENTICATOR == "github":
    c.JupyterHub.authenticator_class = "github"
    missing = [k for k in ("OAUTH_CLIENT_ID", "OAUTH_CLIENT_SECRET", "OAUTH_CALLBACK_URL") if not os.environ.get(k)]
    if missing:
        raise ValueError(f"AUTHENTICATOR=github needs {', '.join(missing)} in the hub's environment (the GitHub "
                         "OAuth app's client id and secret, and https://HOST/hub/oauth_callback)")
    c.GitHubOAuthenticator.client_id = os.environ["OAUTH_CLIENT_ID"]
    c.GitHubOAuthenticator.client_secret = os.environ["OAUTH_CLIENT_SECRET"]
    c.GitHubOAuthenticator.oauth_callback_url = os.environ["OAUTH_CALLBACK_URL"]
    if GITHUB_ORG:
        c.GitHubOAuthenticator.allowed_organizations = {GITHUB_ORG}
        c.GitHubOAuthenticator.scope = ["read:org"]
    c.GitHubOAuthenticator.allowed_users = GITHUB_USERS
    if not (GITHUB_ORG or GITHUB_USERS):
        raise ValueError("AUTHENTICATOR=github needs WORKSHOP_GITHUB_ORG or WORKSHOP_GITHUB_USERS: who may log in")
else:
    raise ValueError(f"WORKSHOP_AUTHENTICATOR={AUTHENTICATOR!r}: use 'native' or 'github'")

# ---------------------------------------------------------------------------------------------------------------
# One single-user server per attendee, limited by systemd; the kit's Python as the notebooks' kernel
# ---------------------------------------------------------------------------------------------------------------
c.JupyterHub.allow_named_servers = False
c.JupyterHub.spawner_class = "systemdspawner.SystemdSpawner"
c.SystemdSpawner.dynamic_users = True  # no system accounts: systemd makes one per attendee, home /var/lib/NAME
c.SystemdSpawner.isolate_tmp = True
c.SystemdSpawner.disable_user_sudo = True
c.Spawner.mem_limit = MEM_LIMIT  # MemoryMax= of the attendee's unit: server, kernels and their children
c.Spawner.cpu_limit = CPU_LIMIT  # CPUQuota=
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 60

# The notebooks name the kernel "python3": this spec makes it the kit's Python, for every attendee, through
# JUPYTER_PATH (ahead of the single-user server's own environment).
KERNELS = STATE_DIR / "kernelspec"
spec_dir = KERNELS / "kernels" / "python3"
spec_dir.mkdir(parents=True, exist_ok=True)
(spec_dir / "kernel.json").write_text(json.dumps({
    "argv": [KIT_PYTHON, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
    "display_name": "Python 3 (gputrain-kit)", "language": "python", "metadata": {"debugger": True},
}, indent=1))
for path in (KERNELS, KERNELS / "kernels", spec_dir):
    os.chmod(path, 0o755)
os.chmod(spec_dir / "kernel.json", 0o644)

# The server is JupyterLab from the hub's environment; its first start copies the notebooks from the kit.
SINGLEUSER = str(Path(sys.prefix) / "bin" / "jupyterhub-singleuser")
c.Spawner.cmd = ["/bin/bash", "-c",
                 f'test -e "$HOME/{COURSE_FOLDER}/00_start_here.ipynb" || '
                 f'{shlex.quote(KIT_PYTHON)} -m gputrain_kit notebooks "$HOME/{COURSE_FOLDER}"; '
                 f'exec {shlex.quote(SINGLEUSER)} "$@"', "workshop-singleuser"]
c.Spawner.default_url = f"/lab/tree/{COURSE_FOLDER}/00_start_here.ipynb"
c.Spawner.environment = {"JUPYTER_PATH": str(KERNELS)}


# ---------------------------------------------------------------------------------------------------------------
# GPUs and memory caps: pre_spawn_hook
# ---------------------------------------------------------------------------------------------------------------
def _nvidia_smi(*args):
    try:
        return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30,
                              check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def gpu_slots():
    """The CUDA_VISIBLE_DEVICES values to hand out, and one GPU's memory in MB (None when unknown)."""
    if GPUS == "auto":
        listing = _nvidia_smi("-L").splitlines()
        if any(line.strip().startswith("MIG ") for line in listing):
            raise ValueError("nvidia-smi -L lists MIG devices: set WORKSHOP_GPUS to their UUIDs and "
                             "WORKSHOP_GPU_MEMORY_MB to one instance's memory")
        slots = [str(i) for i in range(sum(line.startswith("GPU ") for line in listing))]
    elif GPUS.strip().isdigit():
        slots = [str(i) for i in range(int(GPUS))]
    else:
        slots = [s.strip() for s in GPUS.split(",") if s.strip()]
    if GPU_MEMORY_MB != "auto":
        return slots, int(GPU_MEMORY_MB)
    sizes = [int(v) for v in _nvidia_smi("--query-gpu=memory.total", "--format=csv,noheader,nounits").split()
             if v.strip().isdigit()]
    return slots, (min(sizes) if sizes else None)


SLOTS, ONE_GPU_MB = gpu_slots()
SHARE_MB = ONE_GPU_MB // ATTENDEES_PER_GPU - GPU_RESERVE_MB if (SLOTS and ONE_GPU_MB) else None
LOGICAL_MB = SHARE_MB // SETUP_DEVICES if SHARE_MB else None
if SHARE_MB is not None and LOGICAL_MB < 64:
    raise ValueError(f"{ATTENDEES_PER_GPU} attendees on a {ONE_GPU_MB} MB GPU leave {SHARE_MB} MB each: too little "
                     "(kit.setup needs memory_limit_mb >= 64 per logical GPU); lower WORKSHOP_ATTENDEES_PER_GPU")
ASSIGNMENTS = STATE_DIR / "gpu_assignments.json"


def seat_of(name):
    """The attendee's seat: 0 for the first to start a server, 1 for the next...; kept across restarts."""
    seats = json.loads(ASSIGNMENTS.read_text()) if ASSIGNMENTS.exists() else {}
    if name not in seats:
        seats[name] = len(seats)
        partial = ASSIGNMENTS.with_suffix(".partial")
        partial.write_text(json.dumps(seats, indent=1))
        partial.replace(ASSIGNMENTS)
    return seats[name]


def pre_spawn_hook(spawner):
    """Give the attendee a GPU round-robin (none on a CPU-only server) and the memory caps to use."""
    env = dict(spawner.environment)
    seat = seat_of(spawner.user.name)
    env["GPUTRAIN_WORKSHOP_SEAT"] = str(seat)
    if not SLOTS:
        env["CUDA_VISIBLE_DEVICES"] = ""  # CPU-only server: simulated devices, no GPU to share
    else:
        if seat >= len(SLOTS) * ATTENDEES_PER_GPU:
            raise RuntimeError(f"The workshop is full: {len(SLOTS)} GPU(s) x {ATTENDEES_PER_GPU} attendees. Ask "
                               "the instructor (WORKSHOP_ATTENDEES_PER_GPU, then restart the hub).")
        env["CUDA_VISIBLE_DEVICES"] = SLOTS[seat % len(SLOTS)]
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # the numbers nvidia-smi shows
        if SHARE_MB:
            env["GPUTRAIN_GPU_MEMORY_MB"] = str(SHARE_MB)  # the attendee's share of the GPU, for TensorFlow
            env["GPUTRAIN_MEMORY_LIMIT_MB"] = str(LOGICAL_MB)  # per logical GPU: kit.setup(memory_limit_mb=...)
        # A TensorFlow process that does not call kit.setup() (a script, notebook 01's demonstration of the
        # default) grows its GPU memory instead of reserving most of the card that others share.
        env["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"
        env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"  # JAX (notebook 09), likewise
    spawner.environment = env
    spawner.log.info("workshop: %s seat %d, CUDA_VISIBLE_DEVICES=%r, GPUTRAIN_MEMORY_LIMIT_MB=%s, mem_limit=%s",
                     spawner.user.name, seat, env["CUDA_VISIBLE_DEVICES"], env.get("GPUTRAIN_MEMORY_LIMIT_MB"),
                     spawner.mem_limit)


c.Spawner.pre_spawn_hook = pre_spawn_hook
