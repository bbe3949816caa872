"""Secrets masked before anything is written: a table of secret shapes x the channels they arrive by.

`SECRET_SHAPES` (name -> a maker of (text as it appears, the secret inside it)) is the shape list the
production benchmark reuses. Each channel gets its own values (seeded), so a leak names its channel:
user text, tool results small and large (offloaded), tool errors, memory, notes and evidence the app
writes through `aether_context.adk.task`, and artifacts. The run is a real Runner with the plugin,
ADK's `DatabaseSessionService` on sqlite and a `file://` store in tmp_path; afterwards no secret may be
in the store folder (blobs decompressed) or in session state (the state and every event's delta).
"""

from __future__ import annotations

import json
import random
import string
import time
from typing import Callable

import pytest

from aether_context import ContextPackPlugin
from aether_context.redact import RedactionSettings, redact, redact_value
from aether_context.store import PackStore
from aether_context.testing import call

from conftest import make_runner, new_session, run_turn, scripted_agent

_ALNUM = string.ascii_letters + string.digits


def _r(rng: random.Random, n: int, alphabet: str = _ALNUM) -> str:
    """`n` random characters with at least one digit (a credential, not a word)."""
    return "".join(rng.choice(alphabet) for _ in range(n - 1)) + rng.choice(string.digits)


Shape = Callable[[random.Random], tuple[str, str]]


def _shape(template: str, n: int, alphabet: str = _ALNUM) -> Shape:
    def make(rng: random.Random) -> tuple[str, str]:
        secret = _r(rng, n, alphabet)
        return template.format(s=secret), secret
    return make


def _private_key(rng: random.Random) -> tuple[str, str]:
    body = "MIIEow" + _r(rng, 58, _ALNUM + "+/")
    return f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n{_r(rng, 64)}\n-----END RSA PRIVATE KEY-----", body


def _jwt(rng: random.Random) -> tuple[str, str]:
    token = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9." + _r(rng, 43, _ALNUM + "-_")
    return token, token


_HEX = "0123456789abcdef"
_LOWER = string.ascii_lowercase + string.digits

# name -> maker of (text as it appears, the secret inside it)
SECRET_SHAPES: dict[str, Shape] = {
    "env_db_password": _shape("DB_PASSWORD={s}", 14),
    "env_pgpassword": _shape("export PGPASSWORD={s}", 12),
    "aws_cli_json": _shape('{{"AccessKeyId": "AKIA{s}", "SecretAccessKey": "{s}wJalrXUtnFEMI/K7MDENG/bPx"}}', 16,
                           string.ascii_uppercase + string.digits),
    "aws_secret_env": _shape("AWS_SECRET_ACCESS_KEY={s}", 40, _ALNUM + "/+"),
    "free_text_password": _shape("my db password is {s}", 12),
    "huggingface": _shape("hf_{s}", 34),
    "stripe_live": _shape("sk_live_{s}", 24),
    "gitlab_pat": _shape("glpat-{s}", 20),
    "npm_token": _shape("npm_{s}", 36),
    "npmrc_auth": _shape("//registry.npmjs.org/:_authToken=npm_{s}", 36),
    "github_pat": _shape("ghp_{s}", 36),
    "slack_bot": _shape("xoxb-2048-8192-{s}", 24),
    "aws_access_key": _shape("AKIA{s}", 16, string.ascii_uppercase + string.digits),
    "google_api_key": _shape("AIza{s}", 35, _ALNUM + "_-"),
    "jwt": _jwt,
    "openai": _shape("sk-proj-{s}", 40),
    "anthropic": _shape("sk-ant-api03-{s}", 40),
    "private_key": _private_key,
    "url_password": _shape("postgres://admin:{s}@db.internal:5432/prod", 14),
    "bearer": _shape("Authorization: Bearer {s}", 32),
    "basic_auth_header": _shape("Authorization: Basic {s}", 24),
    "sendgrid": _shape("SG.{s}", 22),  # completed below with its second part
    "yaml_api_key": _shape("api_key: {s}", 18),
    "env_github_token": _shape("GITHUB_TOKEN={s}", 20),
    "json_client_secret": _shape('{{"client_secret": "{s}"}}', 24),
    "camel_api_key": _shape('apiKey = "{s}"', 20),
    "quoted_high_entropy": lambda rng: (lambda s: (f'value "{s}"', s))("".join(rng.sample(_ALNUM, 31)) + "7"),
    "twilio": _shape("SK{s}", 32, _HEX),
    "azure_account_key": _shape("AccountKey={s}", 88, _ALNUM + "+/"),
}


def _sendgrid(rng: random.Random) -> tuple[str, str]:
    a, b = _r(rng, 22, _ALNUM + "_-"), _r(rng, 43, _ALNUM + "_-")
    return f"SG.{a}.{b}", b


SECRET_SHAPES["sendgrid"] = _sendgrid


def secret_values(seed: int) -> list[tuple[str, str, str]]:
    """(shape, text, secret) for every shape, with values of their own per seed."""
    rng = random.Random(seed)
    return [(name, *make(rng)) for name, make in SECRET_SHAPES.items()]


# ------------------------------------------------------------------------------------------------
# the masker alone
# ------------------------------------------------------------------------------------------------


def test_the_table_has_at_least_twenty_shapes():
    assert len(SECRET_SHAPES) >= 20


@pytest.mark.parametrize("name", sorted(SECRET_SHAPES))
def test_each_shape_is_masked_in_text_json_and_escaped_json(name):
    for seed in range(3):
        rng = random.Random(seed)
        text, secret = SECRET_SHAPES[name](rng)
        for wrapped in (f"before {text} after", json.dumps({"out": f"line\n{text}\nend"}),
                        json.dumps(json.dumps({"log": text}))):
            out, n = redact(wrapped)
            assert secret not in out and n >= 1, (name, wrapped, out)
            assert redact(out) == (out, 0), (name, out)  # idempotent


def test_secret_named_fields_and_suffixes_in_structured_values():
    value = {"DB_PASSWORD": "x1", "SecretAccessKey": "abc", "nested": [{"apiToken": "tok3n"}], "max_tokens": 300,
             "primary_key": "id", "note": "PGPASSWORD=hunter22 psql"}
    out, n = redact_value(value)
    assert out["max_tokens"] == 300 and out["primary_key"] == "id"
    assert "hunter22" not in json.dumps(out) and "x1" not in json.dumps(out) and n >= 3


ORDINARY = [
    "sha256:" + "ab" * 32, '"commit": "3f786850e387550fdab836ed7e6dc881de23001b"',
    '"session_id": "6f1c0e5e-2b1b-4c5a-9a4e-8a3d2b1c0e5e"', "the password field is required", "the token is expired",
    "max_tokens=1000 input_tokens: 30", "monkey=banana", "primary_key=id sort_key: created_at", "key: value",
    "token count 12345 bearer of news", "path=/usr/lib/python3/site-packages/google/adk/runners.py",
    "GET https://example.com/api/v1/items?page=2 200 OK", "2026-12-07T03:00:00Z INFO worker-3 done in 12 ms",
    "def lookup(key: str) -> dict:", "Reset your password at https://example.com/reset",
]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_is_left_alone(text):
    assert redact(text) == (text, 0)


def test_settings_turn_parts_off():
    text = 'DB_PASSWORD=Xy7pq2LmNz4 and "Zx8Vq2Lm5Nr7Tb1Kc4Hd9Jf3Gs6Pw"'
    assert redact(text, RedactionSettings(enabled=False)) == (text, 0)
    assert "Zx8Vq2Lm5Nr7Tb1Kc4Hd9Jf3Gs6Pw" in redact(text, RedactionSettings(entropy=False))[0]
    assert "Xy7pq2LmNz4" not in redact(text, RedactionSettings(entropy=False))[0]


def test_a_megabyte_masks_in_bounded_time():
    """Linear and bounded: 1 MB of ordinary log text, of JSON, and of text dense with keywords and near misses."""
    lines = [f"2026-12-07T03:{i % 60:02d}:00Z INFO worker-{i % 7} request id={i * 7919} path=/api/v1/items/{i} "
             f"status=200 key_count={i % 9} token_budget={i}" for i in range(9000)]
    log = "\n".join(lines)[:1_000_000]
    dense = ("password=" + "a" * 20 + " key: token secret:: sk- ghp_ eyJ AKIA :// ") * 16_000
    planted = secret_values(99)
    noisy = log[:500_000] + "\n" + "\n".join(t for _, t, _ in planted) + "\n" + log[500_000:]
    for text in (log, json.dumps({"out": log}), dense[:1_000_000], noisy):
        start = time.perf_counter()
        out, _ = redact(text)
        elapsed = time.perf_counter() - start
        # about 0.1-0.5 s on an idle core (0.4-2 s with the machine shared 5 ways); a pattern quadratic on a long
        # line takes minutes (detect-secrets' npm pattern alone: 26 s on 1 MB of JSON)
        assert elapsed < 30.0, elapsed
    assert all(secret not in out for _, _, secret in planted)


# ------------------------------------------------------------------------------------------------
# every channel through a real Runner
# ------------------------------------------------------------------------------------------------

CHANNELS = ("user_text", "tool_small", "tool_large", "tool_error", "memory", "notes", "artifact")


def _lines(seed: int) -> str:
    return "\n".join(text for _, text, _ in secret_values(seed))


def _store_text(root) -> str:
    """Every file under the store folder as text, blobs decompressed (a compressed secret is still a secret)."""
    store = PackStore(f"file://{root}", background=False)
    out = []
    for path in store.fs.find(store.root):
        name = path.rsplit("/", 1)[-1]
        data = store.get_blob(name) if "/blobs/" in path and not name.startswith(".") else store.fs.cat(path)
        out.append(data.decode("utf-8", "replace"))
    return "\n".join(out)


RUN: dict[str, str] = {}


def _without_sent_requests(state: dict) -> dict:
    """Session state without the texts as sent (the known gap above)."""
    out = {}
    for key, value in (state or {}).items():
        if key.startswith("aether:pack:") and isinstance(value, dict) and isinstance(value.get("state"), dict):
            value = {**value, "state": {k: v for k, v in value["state"].items() if k != "sent_requests"}}
        if key.startswith("aether:pack_text:") and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k != "payload_text"}
        out[key] = value
    return out


async def test_no_secret_of_any_channel_reaches_the_store_or_session_state(tmp_path):
    from google.adk.memory import InMemoryMemoryService
    from google.adk.sessions import DatabaseSessionService
    from google.genai import types

    from aether_context.adk.task import add_evidence, add_note

    seeds = {channel: i + 1 for i, channel in enumerate(CHANNELS)}

    def read_env(env: str) -> dict:
        """Read a small environment file."""
        return {"env": env, "content": _lines(seeds["tool_small"])}

    def dump_logs(service: str) -> dict:
        """Dump a service's logs."""
        filler = [f"{service} line {i}: request served in {i % 97} ms from the staging pool" for i in range(600)]
        filler[300] = _lines(seeds["tool_large"])
        return {"service": service, "log": "\n".join(filler)}

    def check_db(host: str) -> dict:
        """Connect to a database."""
        return {"error": f"ConnectionError: could not connect to {host}: {_lines(seeds['tool_error'])}"}

    def remember(topic: str, tool_context) -> dict:
        """Keep a note for later."""
        add_note(tool_context.state, f"{topic}: {_lines(seeds['notes'])}")
        add_evidence(tool_context.state, id="env", summary=f"staging env: {_lines(seeds['notes'] + 100)}")
        return {"saved": True}

    async def save_report(title: str, tool_context) -> dict:
        """Save a report as an artifact."""
        version = await tool_context.save_artifact(
            "creds.txt", types.Part(text=f"{title}\n{_lines(seeds['artifact'])}"))
        return {"saved": "creds.txt", "version": version}

    # memory: an earlier session in which the agent said the memory channel's secrets
    memory = InMemoryMemoryService()
    earlier, _ = scripted_agent([f"The staging credentials are:\n{_lines(seeds['memory'])}"])
    first = make_runner(earlier, memory_service=memory)
    old = await new_session(first)
    await run_turn(first, old, "What are the staging credentials?")
    await memory.add_session_to_memory(await first.session_service.get_session(app_name="testapp", user_id="u",
                                                                                session_id=old))

    db_url = f"sqlite+aiosqlite:///{tmp_path}/sessions.db"
    sessions = DatabaseSessionService(db_url)
    store_root = tmp_path / "packs"
    plugin = ContextPackPlugin(store=PackStore(f"file://{store_root}"), window_tokens=16_000)
    agent, llm = scripted_agent(
        [call("read_env", env="staging"), call("dump_logs", service="api"), call("check_db", host="db.internal"),
         call("remember", topic="staging"), call("save_report", title="creds"), "done", "They are masked."],
        tools=[read_env, dump_logs, check_db, remember, save_report])
    runner = make_runner(agent, plugins=[plugin], memory_service=memory, session_service=sessions)
    sid = await new_session(runner)
    await run_turn(runner, sid, f"Set up staging with these:\n{_lines(seeds['user_text'])}")
    await run_turn(runner, sid, "What are the staging credentials?")
    plugin.packer.store.flush()

    session = await sessions.get_session(app_name="testapp", user_id="u", session_id=sid)
    # the requests as sent are checked apart: test_user_text_as_sent_is_not_kept_in_state
    state = _without_sent_requests(session.state)
    deltas = [_without_sent_requests(e.actions.state_delta) for e in session.events if e.actions]
    written = {
        "store": _store_text(store_root),
        "session state": json.dumps(state, default=str),
        "state deltas": json.dumps(deltas, default=str),
    }
    RUN["sent_requests"] = json.dumps([session.state, [e.actions.state_delta for e in session.events if e.actions]],
                                      default=str)
    leaks = [(channel, shape, where)
             for channel, seed in seeds.items() for shape, _, secret in secret_values(seed)
             for where, text in written.items() if secret in text]
    leaks += [("notes", shape, where) for shape, _, secret in secret_values(seeds["notes"] + 100)
              for where, text in written.items() if secret in text]
    assert not leaks, f"{len(leaks)} secrets unmasked on disk: {leaks[:20]}"
    # the channels did reach what was written, masked
    assert written["store"].count("[REDACTED:") >= 5 * len(SECRET_SHAPES)
    assert "[REDACTED:" in written["session state"]
    assert any("artifacts/" in str(p) or "/blobs/" in str(p) for p in store_root.rglob("*"))
    await sessions.close() if hasattr(sessions, "close") else None


def test_user_text_as_sent_is_not_kept_in_state():
    """Session state holds pointers: the payload text and the requests as sent live in the store, masked."""
    if "sent_requests" not in RUN:
        pytest.skip("runs after test_no_secret_of_any_channel_reaches_the_store_or_session_state")
    assert not [shape for shape, _, secret in secret_values(1) if secret in RUN["sent_requests"]]


def test_the_package_logs_are_masked(caplog):
    import logging

    text, secret = SECRET_SHAPES["github_pat"](random.Random(5))
    log = logging.getLogger("aether_context.adk.packer")
    with caplog.at_level(logging.INFO):
        log.error("offloading the result of %s failed", f"read_env ({text})")
        try:
            raise ValueError(f"cannot connect: {text}")
        except ValueError:
            log.error("could not record the failure", exc_info=True)
        logging.getLogger("some.other.library").error("left as it is: %s", text)
    handler_text = "\n".join(caplog.handler.format(r) for r in caplog.records[:2])
    assert secret not in handler_text and "[REDACTED:" in handler_text
    assert secret in caplog.records[2].getMessage()  # another library's records are not ours to touch


def test_a_profile_can_keep_originals_as_returned(tmp_path):
    """`redaction: {originals: false}`: an offloaded original is saved as the tool returned it; the store
    still masks everything else it writes."""
    from aether_context.adk.offload import ArtifactGateway

    text, secret = SECRET_SHAPES["env_db_password"](random.Random(3))
    data = f"config\n{text}\n".encode()
    masked = ArtifactGateway(PackStore(f"file://{tmp_path}/a", background=False)).masked(data, "text/plain")
    assert secret.encode() not in masked and b"[REDACTED:" in masked
    kept = PackStore(f"file://{tmp_path}/b", background=False, redaction=RedactionSettings(originals=False))
    assert ArtifactGateway(kept).masked(data, "text/plain") == data


def test_a_secret_at_any_chunk_boundary_of_a_huge_text_is_masked():
    """Anchors are searched a chunk at a time (a whole-text `find` would hold the event loop): an anchor
    that straddles a chunk's end is still found."""
    from aether_context.redact import _CHUNK, redact

    for at in (_CHUNK - 9, _CHUNK - 4, _CHUNK - 1, _CHUNK, 2 * _CHUNK - 5):
        text = "x " * (3 * _CHUNK // 2)
        secret = "password=Hunter2Hunter2"
        text = text[:at] + " " + secret + " " + text[at + len(secret) + 2:]
        masked, n = redact(text)
        assert n >= 1 and "Hunter2Hunter2" not in masked, at


def test_a_long_text_indexed_in_one_pass_masks_as_one_search_per_anchor(monkeypatch):
    """A text finds where each anchor can be in one pass (Aho-Corasick): it masks exactly what a search of the
    whole text per anchor masks, anchors across chunk ends and keyword-dense chunks included."""
    import aether_context.redact as redact_module

    chunk = redact_module._CHUNK
    secrets = [" password=Hunter2Hunter2 ", " ghp_" + "a1B2" * 9 + " ", " sk-proj-" + "Q7w" * 9 + " "]
    texts = []
    for filler in ("row ok 200 bytes\n", "key token pass "):  # no anchor; an anchor in every chunk
        body = list(filler * (40 * chunk // len(filler)))
        for i, offset in enumerate((-6, -4, -3, -2, -1, 0, 1)):
            secret = secrets[i % len(secrets)]
            at = (3 + 5 * i) * chunk + offset - 1  # its first anchor starts in a chunk's last characters
            body[at:at + len(secret)] = list(secret)
        texts.append("".join(body))
    indexed = [redact_module.redact(t) for t in texts]
    for masked, n in indexed:
        assert n >= 7 and not any(secret.strip()[-8:] in masked for secret in secrets)
    monkeypatch.setattr(redact_module._Text, "_listed", lambda self, lit: None)  # every anchor searched everywhere
    assert indexed == [redact_module.redact(t) for t in texts]


def test_a_character_whose_lower_case_is_longer_keeps_the_masks_in_place():
    """'İ' lowers to two characters: the search text keeps it, so positions found there are the text's own (a
    thousand of them would move every later window a thousand characters off its secret)."""
    from aether_context.redact import _Text

    dotted = "İ" * 1_000
    text = "x " * 40_000 + dotted + " password=Hunter2Hunter2 " + "y" * 70_000 + dotted + " DB_TOKEN=abcdef1234567890 end"
    assert len(_Text(text).low) == len(text)
    masked, n = redact(text)
    assert n == 2 and "Hunter2Hunter2" not in masked and "abcdef1234567890" not in masked
    assert masked.startswith("x " * 40_000 + dotted + " password=[REDACTED:") and masked.endswith("] end")
