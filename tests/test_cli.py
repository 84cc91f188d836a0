"""The `tidelog` command, run as a person would: real processes on real files."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.dev_up import TIDELOG, running_dev_up
from tidelog.common.local_endpoints import user_state_file


def tidelog(
    *args: str, stdin: str = "", check: bool = True, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TIDELOG, *args], input=stdin, capture_output=True, text=True, check=check, timeout=120, cwd=cwd
    )


@pytest.fixture(autouse=True)
def own_state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where `tidelog dev up` announces its cluster: this test's own, not the user's."""
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return state


def _unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture(scope="module")
def module_dev_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """`tidelog dev up` in the background until its endpoint table is printed; Ctrl-C at the end.
    One for the module's tests that use it (a start is ~10 s here, issue 37), each with its own
    topics and groups: (its data folder, the state home it is announced in)."""
    folder = tmp_path_factory.mktemp("dev-cluster")
    data, state = folder / "data", folder / "state"
    conventional_free = _free(9292) and _free(8082)
    with running_dev_up(data, environment={"XDG_STATE_HOME": str(state)}) as output:
        assert "broker-3" in output and "controller-2" in output and "gateway-1" in output, output
        if conventional_free:  # Kafka's and REST Proxy's ports, so their recipes work unchanged
            assert "127.0.0.1:9292" in output and "http://127.0.0.1:8082" in output, output
        if shutil.which("prometheus"):
            # Prometheus 2.42's alerts page (its /alerts is the new UI's, a 404 in Debian's build)
            alerts = next(word for word in output.split() if word.endswith("/classic/alerts"))
            assert httpx.get(alerts).status_code == 200, alerts
        yield data, state
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(state))
        assert not user_state_file().exists()  # a stopped cluster is not announced any more


@pytest.fixture
def dev_cluster(module_dev_cluster: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    """The module's dev cluster, announced to this test's commands (the others see none)."""
    data, state = module_dev_cluster
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return data


def test_dev_up_topic_produce_consume_and_restart(dev_cluster: Path) -> None:
    data = ["--data-dir", str(dev_cluster)]
    assert "created topic orders" in tidelog("topic", "create", "orders", "--partitions", "3", *data).stdout
    produced = tidelog("produce", "orders", "--key-separator", ":", *data, stdin="a:one\nb:two\nc:three\n")
    assert "produced 3 records" in produced.stderr
    consumed = tidelog("consume", "orders", "--from-beginning", "--max-messages", "3", "--timeout-ms", "20000", *data)
    assert sorted(consumed.stdout.split()) == ["one", "three", "two"]
    # Any client setting by its Kafka name, as the console tools' --producer-property / --consumer-property
    tidelog("produce", "orders", "--producer-property", "compression.type=zstd", *data, stdin="four\n")
    fetched = ["--consumer-property", "max.partition.fetch.bytes=65536", "--max-messages", "4"]
    consumed = tidelog("consume", "orders", "--from-beginning", *fetched, "--timeout-ms", "20000", *data)
    assert sorted(consumed.stdout.split()) == ["four", "one", "three", "two"]
    misspelt = tidelog("produce", "orders", "--producer-property", "linger.msec=5", *data, stdin="x\n", check=False)
    assert misspelt.returncode != 0 and "--producer-property: " in misspelt.stderr and "linger.msec" in misspelt.stderr
    described = tidelog("topic", "describe", "orders", *data).stdout
    assert "3 partitions" in described and "LEADER EPOCH" in described
    assert "orders" in tidelog("topic", "list", *data).stdout
    assert "active controller" in tidelog("cluster", "describe", *data).stdout
    duplicate = tidelog("topic", "create", "orders", *data, check=False)
    assert duplicate.returncode == 1 and "TOPIC_ALREADY_EXISTS" in duplicate.stderr
    bad = tidelog("topic", "create", "no spaces", *data, check=False)
    assert bad.returncode == 1 and "INVALID_TOPIC_EXCEPTION" in bad.stderr
    assert (
        "altered"
        in tidelog("topic", "alter", "orders", "--partitions", "4", "--config", "retention.ms=1000", *data).stdout
    )
    assert "deleted topic orders" in tidelog("topic", "delete", "orders", *data).stdout

    # Moving replicas and leaders.
    tidelog("topic", "create", "moves", "--partitions", "1", "--replication-factor", "2", *data)
    started = tidelog("topic", "reassign", "moves", "--partition", "0", "--replicas", "3,2,1", *data).stdout
    assert "reassigning moves-0 to [3, 2, 1]" in started
    deadline = time.monotonic() + 30
    while "none under way" not in tidelog("topic", "reassignments", *data).stdout:
        assert time.monotonic() < deadline, "the reassignment did not complete"
        time.sleep(0.2)
    assert "3,2,1" in tidelog("topic", "describe", "moves", *data).stdout
    elected = tidelog("leader", "elect", "--topic", "moves", *data).stdout
    assert "moves-0" in elected and ("ok" in elected or "ELECTION_NOT_NEEDED" in elected)
    cancel = tidelog("topic", "reassign", "moves", "--partition", "0", "--cancel", *data, check=False)
    assert cancel.returncode == 1 and "NO_REASSIGNMENT_IN_PROGRESS" in cancel.stderr
    bad_target = tidelog("topic", "reassign", "moves", "--partition", "0", "--replicas", "1,9", *data, check=False)
    assert bad_target.returncode == 1 and "INVALID_REPLICA_ASSIGNMENT" in bad_target.stderr

    # Consumer groups (the dev cluster runs two coordinators).
    tidelog("topic", "create", "clicks", "--partitions", "2", *data)
    started = time.monotonic()
    nowhere = tidelog("produce", "no-such-topic", *data, stdin="hi\n", check=False)
    assert nowhere.returncode == 1 and "topic 'no-such-topic' does not exist" in nowhere.stderr
    assert time.monotonic() - started < 15  # at once, not after max.block.ms (60 s)
    unread = tidelog("consume", "no-such-topic", *data, check=False)
    assert unread.returncode == 1 and "does not exist" in unread.stderr and "(error 3)" not in unread.stderr
    again = tidelog("topic", "create", "clicks", "--partitions", "2", *data, check=False)
    assert again.returncode == 1 and "TOPIC_ALREADY_EXISTS" in again.stderr
    quiet = tidelog("topic", "create", "clicks", "--partitions", "2", "--if-not-exists", *data)
    assert "exists already" in quiet.stdout  # kafka-topics.sh --if-not-exists
    tidelog("produce", "clicks", "--partition", "0", *data, stdin="a\nb\nc\n")
    planned = tidelog("group", "reset-offsets", "cli-group", "--topic", "clicks", "--to-latest", *data)
    assert "clicks-0" in planned.stdout and "dry run: nothing was changed" in planned.stderr
    assert "cli-group" not in tidelog("group", "list", *data).stdout  # a plan creates no group
    reset = tidelog(
        "group", "reset-offsets", "cli-group", "--topic", "clicks", "--to-latest", "--execute", *data
    ).stdout
    assert "clicks-0" in reset and "3" in reset
    assert "cli-group" in tidelog("group", "list", *data).stdout
    described = tidelog("group", "describe", "cli-group", *data).stdout
    assert "Empty" in described and "clicks-0" in described
    back = tidelog(
        "group", "reset-offsets", "cli-group", "--topic", "clicks", "--to-offset", "1", "--execute", *data
    ).stdout
    assert "clicks-1" in back
    lagging = tidelog("group", "describe", "cli-group", *data).stdout
    assert any(line.split()[:4] == ["clicks-0", "1", "3", "2"] for line in lagging.splitlines()), lagging
    assert "deleted group cli-group" in tidelog("group", "delete", "cli-group", *data).stdout
    missing = tidelog("group", "delete", "cli-group", *data, check=False)
    assert missing.returncode == 1 and "GROUP_ID_NOT_FOUND" in missing.stderr
    never = tidelog("group", "describe", "no-such-group", *data, check=False)  # issue 31: a traceback before
    assert never.returncode == 1 and "does not exist" in never.stderr and "Traceback" not in never.stderr

    # The REST gateway dev up runs (authentication off), on the port kept in cluster.json.
    gateway_port = json.loads((dev_cluster / "cluster.json").read_text())["gateways"]["1"]
    gateway = f"http://127.0.0.1:{gateway_port}"
    produced_over_http = httpx.post(
        f"{gateway}/topics/clicks/partitions/1",
        json={"records": [{"value": {"via": "rest"}}]},
        headers={"content-type": "application/vnd.kafka.json.v2+json"},
    )
    assert produced_over_http.json()["offsets"][0]["offset"] == 0, produced_over_http.text
    assert [p["partition"] for p in httpx.get(f"{gateway}/topics/clicks").json()["partitions"]] == [0, 1]


def test_log_produce_consume_and_dump(tmp_path: Path) -> None:
    folder = str(tmp_path / "orders-3")
    assert "offsets 0..2" in tidelog("log", "produce", folder, stdin="one\ntwo\nthree\n").stdout
    assert tidelog("log", "consume", folder, "--offset", "1").stdout == "two\nthree\n"
    dump = tidelog("log", "dump", folder, "--records").stdout
    assert "log orders-3: start 0, end 3" in dump
    assert "batch base 0 last 2 records 3" in dump
    assert "value b'three'" in dump


def test_commands_without_a_cluster_say_so(tmp_path: Path) -> None:
    result = tidelog("topic", "list", "--data-dir", str(tmp_path / "none"), check=False)
    assert result.returncode != 0 and "tidelog dev up" in result.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    guessed = tidelog("topic", "list", check=False, cwd=elsewhere)
    assert "trying localhost:9292" in guessed.stderr
    if _free(9292):  # nothing there: a one-line error at once, not a traceback after a timeout
        assert guessed.returncode == 1 and "error: no broker answers at localhost:9292" in guessed.stderr
        assert "tidelog dev up" in guessed.stderr and "Traceback" not in guessed.stderr


def test_a_stopped_local_cluster_is_said_at_once(tmp_path: Path) -> None:
    """Issue 31: a cluster.json whose cluster is not running: one line naming it, no waiting."""
    data = tmp_path / "data"
    data.mkdir()
    ports = {"brokers": {"1": _unused_port()}, "controllers": {"1": _unused_port()}}
    (data / "cluster.json").write_text(json.dumps(ports))
    started = time.monotonic()
    for command in (("topic", "list"), ("cluster", "describe"), ("group", "list")):
        result = tidelog(*command, check=False, cwd=tmp_path)
        assert result.returncode == 1 and f"the local cluster of {data / 'cluster.json'}" in result.stderr
        assert "Is the cluster running?" in result.stderr and "Traceback" not in result.stderr
    assert time.monotonic() - started < 20  # three commands, none waiting out a request timeout (30 s)


def test_commands_find_the_running_dev_cluster_from_any_folder(dev_cluster: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    tidelog("topic", "create", "found-it", "--partitions", "1", cwd=elsewhere)
    listed = tidelog("topic", "list", cwd=elsewhere)
    assert "found-it" in listed.stdout
    assert f"using the local cluster of `tidelog dev up` at {dev_cluster}" in listed.stderr


def test_version_human_numbers_and_a_closed_pipe() -> None:
    """Issue 31: `--version`; quotas in full (2,097,152, not 2.09715e+06); a reader that leaves
    (`| head`) is not reported as a cluster that did not answer."""
    import argparse  # noqa: PLC0415

    from tidelog.cli.connection import run_command  # noqa: PLC0415
    from tidelog.cli.quota_commands import _human  # noqa: PLC0415

    assert tidelog("--version").stdout.startswith("tidelog ")
    assert (_human(2097152.0), _human(0.5), _human(1e12)) == ("2,097,152", "0.5", "1,000,000,000,000")

    async def leaves(args: argparse.Namespace) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    with pytest.raises(BrokenPipeError):  # main() then quietly ends the command
        run_command(leaves)(argparse.Namespace())


def test_every_command_and_option_says_what_it_does() -> None:
    """Issue 31: `topic --help` described 2 of its 7 commands, most options had no help."""
    import argparse  # noqa: PLC0415

    from tidelog.cli.main import build_parser  # noqa: PLC0415

    silent: list[str] = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                described = {choice.dest for choice in action._choices_actions if choice.help}
                for name, sub in action.choices.items():
                    if name not in described:
                        silent.append(f"{path} {name}")
                    walk(sub, f"{path} {name}")
            elif not isinstance(action, argparse._HelpAction | argparse._VersionAction) and not action.help:
                silent.append(f"{path} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "tidelog")
    assert silent == []


def test_kafka_tool_habits(dev_cluster: Path, tmp_path: Path) -> None:
    """Issue 31: options before or after the command, JSON output, kcat-like formats, keys,
    headers and partitions on produce, a committing `consume --group`, reset-offsets' other
    targets, and `acl add` saying that nothing enforces ACLs here."""
    data = str(dev_cluster)
    tidelog("--data-dir", data, "topic", "create", "habits", "--partitions", "2")  # a global option first
    assert "habits" in json.loads(tidelog("topic", "list", "-o", "json", "--data-dir", data).stdout)
    described = json.loads(tidelog("-o", "json", "--data-dir", data, "topic", "describe", "habits").stdout)
    assert [p["partition"] for p in described["partitions"]] == [0, 1] and described["partitions"][0]["leader"]

    tidelog(
        "produce", "habits", "-p", "1", "-k", "k1", "-H", "trace:abc", "-H", "n:1", "--data-dir", data, stdin="x\ny\n"
    )
    line = "%t/%p/%o key=%k value=%v headers=%h\\n"
    shown = tidelog("consume", "habits", "-p", "1", "--from-beginning", "-n", "2", "-o", line, "--data-dir", data)
    assert (
        shown.stdout
        == "habits/1/0 key=k1 value=x headers=trace=abc,n=1\nhabits/1/1 key=k1 value=y headers=trace=abc,n=1\n"
    )
    as_json = tidelog("consume", "habits", "-p", "1", "--offset", "1", "-n", "1", "-o", "json", "--data-dir", data)
    record = json.loads(as_json.stdout)
    assert (record["offset"], record["key"], record["value"]) == (1, "k1", "y")
    assert record["headers"] == [{"name": "trace", "value": "abc"}, {"name": "n", "value": "1"}]
    bad_format = tidelog("consume", "habits", "-o", "yaml", "--data-dir", data, check=False)
    assert bad_format.returncode != 0 and "give text, json or a pattern" in bad_format.stderr

    # A group that commits what it printed: a second member run reads on from there.
    tidelog("produce", "habits", "-p", "0", "--data-dir", data, stdin="a\nb\nc\n")
    first = tidelog(
        "consume", "habits", "-g", "readers", "--from-beginning", "-n", "3", "--timeout-ms", "30000", "--data-dir", data
    )
    assert len(first.stdout.split()) == 3
    # --from-beginning applies where the group committed nothing; elsewhere it reads on from the commit.
    rest = tidelog(
        "consume", "habits", "-g", "readers", "--from-beginning", "-n", "2", "--timeout-ms", "30000", "--data-dir", data
    )
    assert sorted(first.stdout.split() + rest.stdout.split()) == ["a", "b", "c", "x", "y"]
    group = json.loads(tidelog("group", "describe", "readers", "-o", "json", "--data-dir", data).stdout)
    assert {(p["partition"], p["committed"]) for p in group["partitions"]} == {(0, 3), (1, 2)}

    # reset-offsets: --shift-by from the committed, --to-datetime, --all-topics; a plan unless --execute.
    shifted = json.loads(
        tidelog(
            "group", "reset-offsets", "readers", "--all-topics", "--shift-by", "-1", "-o", "json", "--data-dir", data
        ).stdout
    )
    assert {(p["partition"], p["current"], p["new"]) for p in shifted} == {(0, 3, 2), (1, 2, 1)}
    past = tidelog(
        "group",
        "reset-offsets",
        "readers",
        "--topic",
        "habits",
        "--to-datetime",
        "2000-01-01T00:00:00Z",
        "--execute",
        "-o",
        "json",
        "--data-dir",
        data,
    )
    assert {p["new"] for p in json.loads(past.stdout)} == {0}
    future = tidelog(
        "group",
        "reset-offsets",
        "readers",
        "--topic",
        "habits",
        "--to-datetime",
        "2999-01-01T00:00:00",
        "-o",
        "json",
        "--data-dir",
        data,
    )
    assert {(p["partition"], p["new"]) for p in json.loads(future.stdout)} == {(0, 3), (1, 2)}  # none after: the end
    beyond = tidelog(
        "group", "reset-offsets", "readers", "--topic", "habits", "--shift-by", "100", "-o", "json", "--data-dir", data
    )
    assert {(p["partition"], p["new"]) for p in json.loads(beyond.stdout)} == {(0, 3), (1, 2)}  # kept within the log
    bad_time = tidelog(
        "group",
        "reset-offsets",
        "readers",
        "--topic",
        "habits",
        "--to-datetime",
        "yesterday",
        "--data-dir",
        data,
        check=False,
    )
    assert bad_time.returncode != 0 and "ISO 8601" in bad_time.stderr

    # No authorizer runs in the plain dev cluster: `acl add` stores and says so.
    added = tidelog(
        "acl",
        "add",
        "--deny-principal",
        "User:ANONYMOUS",
        "--operation",
        "Write",
        "--topic",
        "habits",
        "--data-dir",
        data,
    )
    assert "added 1 ACL binding" in added.stdout and "no authorizer" in added.stderr
    assert "ACL authorizer: off" in tidelog("cluster", "describe", "--data-dir", data).stdout
    assert json.loads(tidelog("acl", "list", "-o", "json", "--data-dir", data).stdout)[0]["permission"] == "Deny"


def test_dev_up_secure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 31: security could not be tried locally. `dev up --secure`: SASL_SSL everywhere, ACLs
    enforced, client.properties that the commands use by themselves, HTTPS with HTTP Basic."""
    data = tmp_path / "data"
    with running_dev_up(data, "--secure") as output:
        assert "ACLs enforced" in output and str(data / "client.properties") in output, output
        here = ["--data-dir", str(data)]
        assert "ACL authorizer: on" in tidelog("cluster", "describe", *here).stdout  # admin, from client.properties
        tidelog("topic", "create", "vault", "--partitions", "1", *here)
        tidelog("topic", "create", "open", "--partitions", "1", *here)
        monkeypatch.setenv("TIDELOG_USER_PASSWORD", "bob-password-1")
        tidelog("user", "create", "bob", *here)
        anonymous = tidelog("topic", "list", "--command-config", "/dev/null", *here, check=False)
        assert anonymous.returncode == 1 and "security.protocol" in anonymous.stderr  # says TLS is wanted
        bob = tmp_path / "bob.properties"
        bob.write_text(
            f"security.protocol=SASL_SSL\nssl.ca.location={data}/secure/ca.crt\n"
            "sasl.username=bob\nsasl.password=bob-password-1\n"
        )
        tidelog("acl", "add", "--allow-principal", "User:bob", "--producer", "--topic", "open", *here)
        tidelog("produce", "open", "--command-config", str(bob), *here, stdin="fine\n")
        refused = tidelog("produce", "vault", "--command-config", str(bob), *here, stdin="no\n", check=False)
        assert refused.returncode == 1 and "TOPIC_AUTHORIZATION_FAILED" in refused.stderr
        passwords = json.loads((data / "secure" / "passwords.json").read_text())
        gateway = json.loads((data / "cluster.json").read_text())["gateways"]["1"]
        verify = ssl.create_default_context(cafile=str(data / "secure" / "ca.crt"))
        over_https = httpx.get(f"https://127.0.0.1:{gateway}/topics", auth=("app", passwords["app"]), verify=verify)
        assert over_https.status_code == 200 and "vault" in over_https.json(), over_https.text
        assert httpx.get(f"https://127.0.0.1:{gateway}/topics", verify=verify).status_code == 401


def test_scripts_up_installs_only_when_the_project_changed() -> None:
    """Issue 31: `scripts/up` reinstalled the package on every start (~12 s of 19 s) and printed
    setuptools' warnings. Once installed, it goes straight to `tidelog dev up`, saying nothing."""
    repository = Path(__file__).resolve().parents[1]
    up = [str(repository / "scripts" / "up"), "--help"]
    first = subprocess.run(up, check=False, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    assert "warning" not in first.stderr.lower(), first.stderr  # setuptools' license-table warning, say
    started = time.monotonic()
    again = subprocess.run(up, check=False, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "--secure" in again.stdout
    assert again.stderr == ""  # nothing installed, nothing to say
    assert time.monotonic() - started < 10  # no pip run
