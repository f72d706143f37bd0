"""Raw JSON-RPC frames from Python's `websockets` (17.x) against our Rust server.

`cargo test --test interop` starts our server on 127.0.0.1:0 and runs

    python3 client.py ws://127.0.0.1:PORT

It sends text frames exactly as written: every example of the JSON-RPC 2.0
specification (`shared/seed-examples.md`), read from the fixture shared with the Rust and JS
suites (`tests/fixtures/spec-examples.json`), then malformed input written here; and it
compares each answer with the expected one as JSON values (batch answers as sets where their
order is free).
It prints every frame (`-->` sent, `<--` received) and exits 0 only if every case passed.
"""

import asyncio
import json
import sys
from pathlib import Path

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

STEP = 5.0  # the longest one answer may take
# The specification's examples, shared with tests/spec_examples.rs and the JS peer's tests.
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "spec-examples.json"
SPEC_EXAMPLES = json.loads(FIXTURE.read_text(encoding="utf-8"))
failures = []
passed = 0


def log(line):
    print(line, flush=True)


def short(text, limit=300):
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


def canon(value):
    """A JSON value's canonical text: equal values, equal texts (1 and 1.0 and true differ)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def as_set(value):
    if not isinstance(value, list):
        return None
    return sorted(canon(v) for v in value)


def check(ok, name, detail=""):
    global passed
    if ok:
        passed += 1
        log(f"ok   {name}")
    else:
        failures.append(name)
        log(f"FAIL {name}{': ' + detail if detail else ''}")


def error(code, message, id):
    return {"jsonrpc": "2.0", "error": {"code": code, "message": message}, "id": id}


PARSE_ERROR = error(-32700, "Parse error", None)
INVALID_REQUEST = error(-32600, "Invalid Request", None)

MARKER = '{"jsonrpc":"2.0","method":"no.such.method","id":"marker"}'


class Client:
    def __init__(self, ws):
        self.ws = ws

    async def send(self, frame):
        if isinstance(frame, bytes):
            log(f"--> <binary frame of {len(frame)} bytes>")
        else:
            log(f"--> {short(frame)}")
        await self.ws.send(frame)

    async def recv_text(self):
        frame = await asyncio.wait_for(self.ws.recv(), STEP)
        if isinstance(frame, bytes):
            raise AssertionError(f"the server sent a binary frame: {frame!r}")
        log(f"<-- {short(frame)}")
        return frame

    async def ask(self, frame):
        await self.send(frame)
        return await self.recv_text()

    async def expect(self, name, frame, expected, *, batch=False):
        """Sends `frame`; the next answer must equal `expected` (as a set for batches)."""
        try:
            text = await self.ask(frame)
            got = json.loads(text)
        except Exception as e:  # a timeout, a closed connection, not JSON
            check(False, name, repr(e))
            return None
        if batch:
            ok = as_set(got) is not None and as_set(got) == as_set(expected)
        else:
            ok = canon(got) == canon(expected)
        check(ok, name, f"expected {short(canon(expected))}, got {short(text)}")
        return text

    async def expect_nothing(self, name, *frames):
        """Sends `frames`; none may be answered: a marker request sent after them must be
        the very next thing answered."""
        try:
            for frame in frames:
                await self.send(frame)
            got = json.loads(await self.ask(MARKER))
        except Exception as e:
            check(False, name, repr(e))
            return
        check(got == error(-32601, "Method not found", "marker"), name, f"answered before the marker: {got!r}")


def deep(levels, inner=""):
    return "[" * levels + inner + "]" * levels


async def run(url):
    async with connect(url, proxy=None, max_size=None, open_timeout=STEP) as ws:
        c = Client(ws)

        # ---- The specification's examples (seed-examples.md), from the shared fixture ----
        # (tests/spec_examples.rs checks what the fixture holds; this only guards against
        # running none of it.)
        cases = SPEC_EXAMPLES["cases"]
        check(len(cases) == 12, f"{FIXTURE.name} holds seed-examples.md's 12 code blocks", f"{len(cases)} cases")
        for case in cases:
            exchanges = case["exchanges"]
            for i, ex in enumerate(exchanges, 1):
                name = f"spec example {case['name']} ({case['section']}), frame {i} of {len(exchanges)}"
                if ex["expect"] == "none":
                    await c.expect_nothing(name, ex["send"])
                elif ex["expect"] in ("exact", "set"):
                    await c.expect(name, ex["send"], ex["answer"], batch=ex["expect"] == "set")
                else:
                    check(False, name, f"unknown expect {ex['expect']!r} in {FIXTURE}")

        # ---- Malformed and unusual input ----
        await c.expect("null", "null", INVALID_REQUEST)
        await c.expect('a JSON string "x"', '"x"', INVALID_REQUEST)
        await c.expect("a JSON number", "42", INVALID_REQUEST)
        await c.expect(
            "an object as id: invalid, answered with id null",
            '{"jsonrpc":"2.0","method":"subtract","params":[1,2],"id":{"a":1}}',
            INVALID_REQUEST,
        )
        await c.expect(
            "an array as id: invalid, answered with id null",
            '{"jsonrpc":"2.0","method":"subtract","params":[1,2],"id":[1]}',
            INVALID_REQUEST,
        )
        # A member given twice is ambiguous (parsers disagree on which wins): the library
        # documents that such a message is invalid, answered with id null.
        await c.expect(
            "duplicate id member",
            '{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":1,"id":2}',
            INVALID_REQUEST,
        )
        # Another member given twice: the id, given once, is read for the answer.
        await c.expect(
            "duplicate method member",
            '{"jsonrpc":"2.0","method":"subtract","method":"sum","params":[1,2],"id":7}',
            error(-32600, "Invalid Request", 7),
        )
        await c.expect_nothing("a binary frame is ignored", b'{"jsonrpc":"2.0","method":"sum","params":[1],"id":1}')

        huge_id = "x" * 200_000 + ' "quoted" \\ \u00e9\u2713 \U0001F600 ' + "y" * 1000
        huge_id_raw = json.dumps(huge_id, ensure_ascii=True)  # escapes, as sent
        text = await c.expect(
            "a huge string id is echoed",
            '{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":' + huge_id_raw + "}",
            {"jsonrpc": "2.0", "result": 19, "id": huge_id},
        )
        check(text is not None and huge_id_raw in text, "the huge id is echoed byte for byte, escapes as sent")
        big = "123456789012345678901234567890"
        text = await c.expect(
            "an integer id beyond 64 bits is echoed",
            '{"jsonrpc":"2.0","method":"sum","params":[1],"id":' + big + "}",
            {"jsonrpc": "2.0", "result": 1, "id": int(big)},
        )
        check(text is not None and f'"id":{big}' in text.replace(" ", ""), "the big id is echoed as written")
        text = await c.expect(
            "a fractional id is echoed",
            '{"jsonrpc":"2.0","method":"sum","params":[1],"id":-1.50}',
            {"jsonrpc": "2.0", "result": 1, "id": -1.5},
        )
        check(text is not None and "-1.50" in text, "the fractional id is echoed as written")
        await c.expect(
            '"id": null is a request, answered with id null',
            '{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":null}',
            {"jsonrpc": "2.0", "result": 19, "id": None},
        )

        nested = deep(10_000)
        await c.expect(
            "10,000 levels of nesting as the whole frame: a batch of one invalid element",
            nested,
            [INVALID_REQUEST],
        )
        answer = await c.ask('{"jsonrpc":"2.0","method":"sum","params":' + nested + ',"id":"deep"}')
        got = json.loads(answer)
        check(
            got.get("id") == "deep" and got.get("error", {}).get("code") == -32602,
            "10,000 levels of nesting as params: -32602 Invalid params",
            short(answer),
        )
        await c.expect(
            "10,000 levels of nesting inside a batch element's params",
            '[{"jsonrpc":"2.0","method":"update","params":' + nested + '},'
            '{"jsonrpc":"2.0","method":"sum","params":[2,3],"id":"after"}]',
            [{"jsonrpc": "2.0", "result": 5, "id": "after"}],
        )

        await c.expect_nothing(
            "a notification of an unknown method gets no answer",
            '{"jsonrpc":"2.0","method":"no.such.notification","params":[1]}',
        )
        await c.expect_nothing(
            "a response sent to the server is never answered",
            '{"jsonrpc":"2.0","result":1,"id":99}',
            '{"jsonrpc":"2.0","error":{"code":1,"message":"x"},"id":100}',
        )
        await c.expect(
            'jsonrpc "1.0": invalid, with the id',
            '{"jsonrpc":"1.0","method":"sum","params":[1],"id":5}',
            error(-32600, "Invalid Request", 5),
        )
        await c.expect(
            "no jsonrpc member: invalid, with the id",
            '{"method":"sum","params":[1],"id":6}',
            error(-32600, "Invalid Request", 6),
        )
        await c.expect(
            "params neither array nor object: invalid, with the id",
            '{"jsonrpc":"2.0","method":"sum","params":"bar","id":8}',
            error(-32600, "Invalid Request", 8),
        )
        await c.expect(
            "rpc. names are reserved: no such method",
            '{"jsonrpc":"2.0","method":"rpc.discover","id":9}',
            error(-32601, "Method not found", 9),
        )
        answer = json.loads(await c.ask('{"jsonrpc":"2.0","method":"subtract","params":{"minuend":1},"id":10}'))
        check(
            answer.get("id") == 10
            and answer.get("error", {}).get("code") == -32602
            and answer["error"].get("message") == "Invalid params"
            and isinstance(answer["error"].get("data"), str),
            "params that do not fit: -32602 Invalid params, the reason in data",
            repr(answer),
        )
        await c.expect(
            "trailing text after the object: parse error",
            '{"jsonrpc":"2.0","method":"sum","params":[1],"id":11} x',
            PARSE_ERROR,
        )
        await c.expect("NaN is not JSON: parse error", '{"jsonrpc":"2.0","method":"sum","params":[NaN],"id":12}', PARSE_ERROR)
        await c.expect(
            "whitespace around the message is fine",
            ' \n\t{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":13}\r\n ',
            {"jsonrpc": "2.0", "result": 3, "id": 13},
        )
        await c.expect(
            "a batch mixing a call, a non-object and a notification",
            '[{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":14}, 5, {"jsonrpc":"2.0","method":"update","params":[1]}]',
            [{"jsonrpc": "2.0", "result": 3, "id": 14}, INVALID_REQUEST],
            batch=True,
        )
        await c.expect(
            "unknown members are ignored",
            '{"jsonrpc":"2.0","method":"sum","params":[4],"id":15,"extra":{"a":[1]}}',
            {"jsonrpc": "2.0", "result": 4, "id": 15},
        )

        # ---- Past the size limit (1 MiB by default): closed with 1009 ----
        try:
            # The server may close while this is still being sent: then `send` raises.
            await c.send('{"jsonrpc":"2.0","method":"sum","params":[1],"id":"big","pad":"' + "p" * (2 << 20) + '"}')
            extra = await asyncio.wait_for(ws.recv(), STEP)
            check(False, "a 2 MiB message closes the connection with 1009", f"got a frame: {short(str(extra))}")
        except ConnectionClosed as e:
            code = e.rcvd.code if e.rcvd else None
            check(code == 1009, "a 2 MiB message closes the connection with 1009", f"close frame received: {e.rcvd}")


async def main(url):
    try:
        await asyncio.wait_for(run(url), 60)
    except Exception as e:
        check(False, "the run completed", repr(e))
    log(f"checks ok: {passed}; checks failed: {len(failures)}")
    for f in failures:
        log(f"  failed: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python3 client.py ws://HOST:PORT", file=sys.stderr)
        sys.exit(2)
    sys.exit(asyncio.run(main(sys.argv[1])))
