"""Containers that stand in for real hosts in tests/integration/test_ansible.py.

Each "host" is a container of ``deploy/docker/ansible-host.Dockerfile``: systemd as PID 1 (in a
private cgroup namespace with CAP_SYS_ADMIN: ``--privileged`` is refused on these machines and
needed nowhere), sshd, and the OS packages the roles declare. The test reaches them as Ansible
would reach servers: SSH as root with a key it generated, at each container's address on a network
the test created (the brokers advertise those addresses, which the machine running the test
reaches directly, so librdkafka on the host and the containers use the same listener).

The image is built with the docker SDK from the Dockerfile and tagged by the Dockerfile's hash, so
it is built once per change of that file (about a minute, with apt reaching Debian's archive).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import docker
from docker.models.containers import Container
from docker.models.networks import Network

from tests.integration.containers import RUN_LABEL, remove_labelled

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_DIR = ROOT / "deploy" / "ansible"
DOCKERFILE = ROOT / "deploy" / "docker" / "ansible-host.Dockerfile"
FLEET_LABEL = "org.headwater.test-ansible"
BASE_IMAGE = os.environ.get("BASE_IMAGE", "debian:bookworm-slim")


def host_image(client: docker.DockerClient) -> str:
    """The host image for this Dockerfile (built when missing), e.g. headwater/ansible-host:3f2a…"""
    text = DOCKERFILE.read_bytes()
    tag = f"headwater/ansible-host:{hashlib.sha256(text + BASE_IMAGE.encode()).hexdigest()[:12]}"
    try:
        client.images.get(tag)
        return tag
    except docker.errors.ImageNotFound:
        pass
    proc = subprocess.run(
        ["bash", str(ROOT / "deploy" / "scripts" / "ensure-base-image.sh"), BASE_IMAGE],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, f"ensure-base-image.sh failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    # The Dockerfile alone is the context: it copies nothing.
    try:
        client.images.build(
            fileobj=io.BytesIO(text),
            tag=tag,
            network_mode="host",
            buildargs={"BASE_IMAGE": BASE_IMAGE},
            rm=True,
            forcerm=True,
            timeout=900,
        )
    except docker.errors.BuildError as e:
        log = "".join(str(chunk.get("stream", chunk.get("error", ""))) for chunk in e.build_log)
        raise AssertionError(f"building {tag} failed: {e}\n{log[-3000:]}") from e
    return tag


def build_wheelhouse() -> Path:
    """``make wheel``'s work (deploy/ansible/wheelhouse.py): seconds when nothing changed."""
    proc = subprocess.run(
        [sys.executable, str(ANSIBLE_DIR / "wheelhouse.py")], capture_output=True, text=True, timeout=1200
    )
    assert proc.returncode == 0, f"wheelhouse.py failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return ROOT / "build" / "wheelhouse"


@dataclass
class Host:
    name: str
    container: Container
    address: str = ""

    def run(self, *argv: str, check: bool = True) -> str:
        """A command inside the host (docker exec, not SSH: this is the test looking, not Ansible)."""
        code, out = self.container.exec_run(list(argv))
        text = out.decode(errors="replace")
        if check:
            assert code == 0, f"{self.name}: {' '.join(argv)} exited {code}: {text[-2000:]}"
        return str(text)

    def unit(self, unit: str, *props: str) -> dict[str, str]:
        """``systemctl show`` properties of a unit."""
        text = self.run("systemctl", "show", unit, "-p", ",".join(props))
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


@dataclass
class Fleet:
    """Hosts on one network of their own, reachable over SSH with a key made for this run."""

    client: docker.DockerClient
    run_id: str
    image: str
    workdir: Path
    hosts: dict[str, Host] = field(default_factory=dict)
    network: Network | None = None

    @property
    def labels(self) -> dict[str, str]:
        return {RUN_LABEL: self.run_id, FLEET_LABEL: "1"}

    @property
    def key(self) -> Path:
        return self.workdir / "id_ed25519"

    def start(self, names: list[str]) -> Fleet:
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "headwater-ansible-test", "-f", str(self.key)],
            check=True,
        )
        self.network = self.client.networks.create(f"hw-ansible-{self.run_id}", labels=self.labels)
        for name in names:
            container = self.client.containers.run(
                self.image,
                detach=True,
                name=f"hw-ansible-{self.run_id}-{name}",
                hostname=name,
                network=self.network.name,
                labels=self.labels,
                cap_add=["SYS_ADMIN"],
                cgroupns="private",
                tmpfs={"/run": "", "/run/lock": "", "/tmp": ""},
                volumes={str(self.key) + ".pub": {"bind": "/root/.ssh/authorized_keys", "mode": "ro"}},
            )
            self.hosts[name] = Host(name, container)
        for host in self.hosts.values():
            host.container.reload()
            host.address = host.container.attrs["NetworkSettings"]["Networks"][self.network.name]["IPAddress"]
        for host in self.hosts.values():
            wait_ssh(host, 120)
        return self

    def close_ssh(self) -> None:
        """End the SSH master connections Ansible keeps open (ControlPersist) through their sockets."""
        for sock in (self.workdir / "cp").glob("*"):
            subprocess.run(
                ["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "headwater-test"],
                capture_output=True,
                timeout=30,
                check=False,
            )

    def stop(self) -> list[str]:
        """Remove the containers and the network; returns what was left (for the caller to assert)."""
        left = remove_labelled(self.client, f"{RUN_LABEL}={self.run_id}", f"{FLEET_LABEL}=1")
        self.hosts.clear()
        self.network = None
        return left

    def ansible_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            ANSIBLE_CONFIG=str(ANSIBLE_DIR / "ansible.cfg"),
            ANSIBLE_HOME=str(self.workdir / "ansible-home"),
            ANSIBLE_LOCAL_TEMP=str(self.workdir / "ansible-tmp"),
            ANSIBLE_SSH_CONTROL_PATH_DIR=str(self.workdir / "cp"),
            ANSIBLE_FORCE_COLOR="0",
            ANSIBLE_NOCOLOR="1",
            PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
        )
        return env


def wait_ssh(host: Host, timeout: float) -> None:
    """Until sshd answers with its banner (systemd made the host keys and started it)."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host.address, 22), timeout=3) as s:
                banner = s.recv(64)
                if banner.startswith(b"SSH-"):
                    return
                last = repr(banner)
        except OSError as e:
            last = str(e)
        time.sleep(0.5)
    state = host.run("systemctl", "is-system-running", check=False)
    raise AssertionError(f"{host.name}: no SSH at {host.address}:22 after {timeout:.0f} s ({last}); systemd: {state}")


@dataclass
class PlaybookRun:
    returncode: int
    output: str
    seconds: float

    def recap(self) -> dict[str, dict[str, int]]:
        """PLAY RECAP per host: {"dc1-a": {"ok": 30, "changed": 0, "failed": 0, ...}}."""
        out: dict[str, dict[str, int]] = {}
        tail = self.output[self.output.rfind("PLAY RECAP") :]
        for m in re.finditer(r"^(\S+)\s+:\s+(.*)$", tail, re.M):
            out[m.group(1)] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
        return out

    def changed_tasks(self) -> list[str]:
        """'TASK [role : name] host' for every task reported changed (what a second run must not show)."""
        out: list[str] = []
        task = ""
        for line in self.output.splitlines():
            if line.startswith(("TASK [", "RUNNING HANDLER [")):
                task = line.split("]", 1)[0] + "]"
            elif m := re.match(r"changed: \[([^\]]+)\]", line):
                out.append(f"{task} {m.group(1)}")
        return out


def run_playbook(
    fleet: Fleet,
    inventory: Path,
    log: Path,
    timeout: float = 1800,
    playbook: str = "site.yml",
    extra_vars: dict[str, object] | None = None,
) -> PlaybookRun:
    """``ansible-playbook -i <inventory> <playbook> [-e <extra_vars as JSON>]`` from deploy/ansible. Its
    output goes to ``log`` with each line's time since the start (where a slow run spends its time)."""
    start = time.monotonic()
    lines: list[str] = []
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), playbook]
    if extra_vars:
        argv += ["-e", json.dumps(extra_vars)]
    with log.open("w") as out:
        proc = subprocess.Popen(
            argv,
            cwd=ANSIBLE_DIR,
            env=fleet.ansible_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                out.write(f"{time.monotonic() - start:7.1f} {line}")
                out.flush()
            returncode = proc.wait()
        finally:
            killer.cancel()
    if returncode < 0:
        lines.append(f"ansible-playbook killed after {timeout:.0f} s\n")
    return PlaybookRun(returncode, "".join(lines), time.monotonic() - start)
