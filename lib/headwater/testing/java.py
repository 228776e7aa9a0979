"""The Java side of Kafka for tests and benchmarks: pinned jars, fetched once, then used offline.

``tests/java/pom.xml`` pins every version (its ``<properties>``); each module under
``tests/java/deps/`` is one *set*, a classpath whose jars run together (``clients-legacy``:
kafka-clients 2.3.1; ``clients-newest``: the newest 4.x; ``kafka-legacy``: the 2.3.1 broker and
tools; ``streams-mm2``; ``spark-kafka``). ``fetch()`` (``python -m headwater.testing.java fetch``,
the Makefile's ``java-deps``) runs Maven once to copy every set into ``build/java/<set>/`` and
writes a stamp with the hash of the poms; while the stamp matches, later runs start no Maven at all.

When Maven Central cannot be reached, ``fetch`` says so in one line and exits 0: the Java tests
then skip with that line as their reason (``unavailable()``).

``compile_sources`` runs ``javac`` once per (sources, set) and keeps the classes under
``build/java/classes/<hash>/``; ``java_command`` builds a ``java`` command line on a set's classpath
(``kafka-run-class.sh`` in one function, with Kafka's tools log4j configuration).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
JAVA_PROJECT = Path(os.environ.get("HEADWATER_JAVA_PROJECT", REPO / "tests" / "java"))
CACHE = Path(os.environ.get("HEADWATER_JAVA_CACHE", REPO / "build" / "java"))
STAMP = CACHE / ".fetched"
UNREACHABLE = CACHE / ".unreachable"

#: Maven's words for "the repository cannot be reached" (DNS, refused, timed out, offline).
_NETWORK_ERRORS = re.compile(
    r"UnknownHost|Connection refused|Connect to .* failed|Network is unreachable|timed out|"
    r"No route to host|Could not transfer|transfer failed|offline mode",
)


def sets() -> list[str]:
    """The classpath sets, as the parent pom's ``<modules>`` list them."""
    text = (JAVA_PROJECT / "pom.xml").read_text()
    return [m.rsplit("/", 1)[-1] for m in re.findall(r"<module>([^<]+)</module>", text)]


def fingerprint() -> str:
    """The hash of every pom: a changed version means a new fetch."""
    h = hashlib.sha256()
    for pom in sorted(JAVA_PROJECT.glob("**/pom.xml")):
        h.update(str(pom.relative_to(JAVA_PROJECT)).encode() + b"\0" + pom.read_bytes())
    return h.hexdigest()


def cached() -> bool:
    return STAMP.exists() and STAMP.read_text().split()[0] == fingerprint()


def unavailable() -> str | None:
    """Why the Java tests cannot run (one line), or None when every set is in the cache."""
    if cached():
        return None
    if UNREACHABLE.exists():
        return UNREACHABLE.read_text().strip()
    return "the pinned Java artifacts are not fetched: run `make java-deps`"


def fetch(force: bool = False) -> int:
    """Copy every set into the cache (Maven, progress on stdout); 0 also when Central is unreachable."""
    if cached() and not force:
        jars = sum(1 for _ in CACHE.glob("*/*.jar"))
        print(f"java-deps: cached in {_show(CACHE)} ({len(sets())} sets, {jars} jars); Maven not run", flush=True)
        return 0
    mvn = shutil.which("mvn")
    if mvn is None or shutil.which("javac") is None:
        return _unreachable("Maven or a JDK (mvn, javac) is not installed (make system-deps)")
    CACHE.mkdir(parents=True, exist_ok=True)
    UNREACHABLE.unlink(missing_ok=True)
    STAMP.unlink(missing_ok=True)
    names = sets()
    for name in names:
        shutil.rmtree(CACHE / name, ignore_errors=True)
    print(f"java-deps: fetching {len(names)} pinned sets from Maven Central into {_show(CACHE)}", end="", flush=True)
    started = time.monotonic()
    cmd = [mvn, "-B", "-Dstyle.color=never", "-f", str(JAVA_PROJECT / "pom.xml"), f"-Dhw.cache={CACHE}"]
    cmd += os.environ.get("HEADWATER_JAVA_MVN_ARGS", "").split()  # e.g. -s settings.xml with a mirror
    proc = subprocess.Popen(
        [*cmd, "dependency:copy-dependencies"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    downloads, lines = 0, list[str]()
    for line in proc.stdout:  # Maven's own progress, one line per set and a dot per 10 files
        lines.append(line)
        building = re.match(r"\[INFO\] Building (\S+) \S+ +\[(\d+)/(\d+)\]", line)
        if building and building.group(1) in names:
            print(
                f"\njava-deps: [{names.index(building.group(1)) + 1}/{len(names)}] {building.group(1)} ",
                end="",
                flush=True,
            )
        elif line.startswith("[INFO] Downloaded from"):
            downloads += 1
            if downloads % 10 == 0:
                print(".", end="", flush=True)
    print(flush=True)
    code = proc.wait()
    if code != 0:
        text = "".join(lines)
        if _NETWORK_ERRORS.search(text):
            reason = next((ln.strip() for ln in lines if _NETWORK_ERRORS.search(ln)), "")
            return _unreachable(f"Maven Central cannot be reached: {reason[:160]}")
        sys.stdout.write(text[-4000:])
        return code
    for name in names:
        got = list((CACHE / name).glob("*.jar"))
        print(f"java-deps: {name}: {len(got)} jars, {sum(j.stat().st_size for j in got) / 1e6:.1f} MB", flush=True)
    print(f"java-deps: {downloads} files downloaded in {time.monotonic() - started:.1f}s", flush=True)
    STAMP.write_text(f"{fingerprint()} {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")
    print("java-deps: done; later runs use the cache", flush=True)
    return 0


def _unreachable(reason: str) -> int:
    CACHE.mkdir(parents=True, exist_ok=True)
    line = f"Java tests skip: {reason}"
    UNREACHABLE.write_text(line + "\n")
    print(f"java-deps: {line}", flush=True)
    return 0


def _show(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def classpath(*names: str, extra: Sequence[Path] = ()) -> str:
    """The jars of the named sets (in order) and ``extra`` entries, as one ``-cp`` value."""
    entries: list[str] = [str(p) for p in extra]
    for name in names:
        jars = sorted((CACHE / name).glob("*.jar"))
        if not jars:
            raise FileNotFoundError(f"no jars in {CACHE / name}: {unavailable()}")
        entries += [str(j) for j in jars]
    return os.pathsep.join(entries)


def java_home(min_version: int = 17) -> Path:
    """A JDK of at least ``min_version``: JAVA_HOME, the default ``java``, then /usr/lib/jvm."""
    candidates: list[Path] = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(Path(os.environ["JAVA_HOME"]))
    default = shutil.which("javac")
    if default:
        candidates.append(Path(os.path.realpath(default)).parent.parent)
    candidates += sorted(Path("/usr/lib/jvm").glob("*"))
    for home in candidates:
        release = home / "release"
        if not (home / "bin" / "javac").exists() or not release.exists():
            continue
        m = re.search(r'JAVA_VERSION="(\d+)', release.read_text())
        if m and int(m.group(1)) >= min_version:
            return home
    raise FileNotFoundError(f"no JDK {min_version} or newer (JAVA_HOME, PATH, /usr/lib/jvm)")


def compile_sources(sources: Sequence[Path], *names: str, jdk: Path | None = None) -> Path:
    """``javac`` the sources against the sets' classpath, once: the classes directory (cached by the
    hash of the sources, the sets' stamp and the JDK)."""
    home = jdk or java_home()
    h = hashlib.sha256(f"{names} {home} {fingerprint()}".encode())
    for src in sorted(sources):
        h.update(src.name.encode() + b"\0" + src.read_bytes())
    classes = CACHE / "classes" / h.hexdigest()[:16]
    if (classes / ".complete").exists():
        return classes
    tmp = classes.with_name(classes.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    result = subprocess.run(
        [str(home / "bin" / "javac"), "-nowarn", "-d", str(tmp), "-cp", classpath(*names), *map(str, sources)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if result.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"javac failed:\n{result.stdout}{result.stderr}")
    (tmp / ".complete").touch()
    try:
        tmp.rename(classes)
    except OSError:  # another process compiled the same sources first
        shutil.rmtree(tmp, ignore_errors=True)
    return classes


def java_command(
    main: str,
    args: Sequence[str],
    *names: str,
    extra: Sequence[Path] = (),
    jdk: Path | None = None,
    heap: str = "256m",
    quick_start: bool = True,
    properties: dict[str, str] | None = None,
) -> list[str]:
    """A ``java`` command line running ``main`` on the sets' classpath, as ``kafka-run-class.sh``
    does: a small heap, Kafka's tools log4j configuration (warnings to stderr), and the ZooKeeper
    client's SASL probe off (no JAAS file here: it would only log a warning)."""
    home = jdk or java_home()
    props = {
        "log4j.configuration": (JAVA_PROJECT / "tools-log4j.properties").as_uri(),
        "org.slf4j.simpleLogger.defaultLogLevel": "warn",
        "org.slf4j.simpleLogger.logFile": "System.err",
        "zookeeper.sasl.client": "false",
        "java.net.preferIPv4Stack": "true",
        **(properties or {}),
    }
    return [
        str(home / "bin" / "java"),
        f"-Xmx{heap}",
        "-XX:+UseSerialGC",
        *(["-XX:TieredStopAtLevel=1"] if quick_start else []),  # short-lived tools: start fast
        *(f"-D{k}={v}" for k, v in props.items()),
        "-cp",
        classpath(*names, extra=extra),
        main,
        *args,
    ]


#: ``bin/kafka-*.sh`` -> the main class it runs (Kafka 2.3.1's scripts, through kafka-run-class.sh)
KAFKA_TOOLS = {
    "kafka-topics": "kafka.admin.TopicCommand",
    "kafka-configs": "kafka.admin.ConfigCommand",
    "kafka-acls": "kafka.admin.AclCommand",
    "kafka-consumer-groups": "kafka.admin.ConsumerGroupCommand",
    "kafka-reassign-partitions": "kafka.admin.ReassignPartitionsCommand",
    "kafka-preferred-replica-election": "kafka.admin.PreferredReplicaLeaderElectionCommand",
    "kafka-delete-records": "kafka.admin.DeleteRecordsCommand",
    "kafka-log-dirs": "kafka.admin.LogDirsCommand",
    "kafka-console-producer": "kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "kafka.tools.ConsoleConsumer",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "kafka.tools.ConsumerPerformance",
    "kafka-dump-log": "kafka.tools.DumpLogSegments",
    "kafka-server-start": "kafka.Kafka",
}


def kafka_tool(script: str, args: Sequence[str], jdk: Path | None = None) -> list[str]:
    """The command line ``bin/<script>.sh args`` of the Kafka 2.3.1 distribution runs."""
    return java_command(KAFKA_TOOLS[script], args, "kafka-legacy", jdk=jdk, heap="512m")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["fetch"]:
        return fetch(force="--force" in args)
    if args[:1] == ["classpath"] and len(args) > 1:
        print(classpath(*args[1:]))
        return 0
    print("usage: python -m headwater.testing.java fetch [--force] | classpath SET...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
