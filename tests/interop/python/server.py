"""A JSON-RPC 2.0 server hand-written on `websockets` (17.x), for the interop test.

`cargo test --test interop` starts it as `python3 server.py`; its first line of output
is `listening on ws://127.0.0.1:PORT` (port 0: the system picks one). Our Rust client
(`jsonrpc_peer::connect`) then calls its methods, notifies it, sends it batches, and is
called back by it. The server serves one connection and exits when it closes: 0 when
every frame the Rust side sent was strict JSON-RPC 2.0 and every check passed, 1
otherwise. It prints every frame it exchanges (`-->` sent, `<--` received).
"""

import asyncio
import itertools
import json
import sys

from websockets.asyncio.server import serve

STEP = 5.0  # the longest one exchange may take
problems = []


def log(line):
    print(line, flush=True)


def problem(what):
    problems.append(what)
    log(f"FAIL {what}")


class RpcError(Exception):
    def __init__(self, code, message, data=None, has_data=False):
        super().__init__(message)
        self.code, self.message, self.data, self.has_data = code, message, data, has_data

    def to_json(self):
        e = {"code": self.code, "message": self.message}
        if self.has_data:
            e["data"] = self.data
        return e


def invalid_params(why):
    return RpcError(-32602, "Invalid params", why, True)


# ---- Strictness of what the Rust side sends ---------------------------------------------


def strict_problems(m):
    """The ways one message object sent by the Rust side is not strict JSON-RPC 2.0."""
    if not isinstance(m, dict):
        return [f"not an object: {m!r}"]
    out = []
    if m.get("jsonrpc") != "2.0":
        out.append(f"jsonrpc is {m.get('jsonrpc')!r}")
    if "method" in m:
        out += [f"request member {k}" for k in m if k not in ("jsonrpc", "method", "params", "id")]
        if not isinstance(m["method"], str):
            out.append("method is not a string")
        if "params" in m and not isinstance(m["params"], (list, dict)):
            out.append("params neither array nor object")
        # Our ids are numbers from a per-connection counter (DESIGN.md).
        if "id" in m and (type(m["id"]) is not int):
            out.append(f"request id {m['id']!r} is not an integer")
    else:
        out += [f"response member {k}" for k in m if k not in ("jsonrpc", "result", "error", "id")]
        if "id" not in m:
            out.append("response without id")
        if ("result" in m) == ("error" in m):
            out.append("not exactly one of result and error")
        if "error" in m:
            e = m["error"]
            if not isinstance(e, dict):
                out.append("error is not an object")
            else:
                if type(e.get("code")) is not int:
                    out.append("error.code is not an integer")
                if not isinstance(e.get("message"), str):
                    out.append("error.message is not a string")
                out += [f"error member {k}" for k in e if k not in ("code", "message", "data")]
    return out


def reject_constant(name):
    raise ValueError(f"not JSON: {name}")


# ---- One connection ------------------------------------------------------------------------


class Connection:
    def __init__(self, ws):
        self.ws = ws
        self.pending = {}  # id -> future, for the calls this side makes
        self.ids = itertools.count(1)
        # Notifications are recorded without awaiting anything, so in the order their
        # frames arrived (tasks start in the order they were created).
        self.notes = []
        self.note_waiters = []
        self.tasks = set()

    async def send(self, obj):
        text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
        log(f"--> {text}")
        await self.ws.send(text)

    # -- this side calling the Rust side --

    async def call(self, method, params=None, *, id=None):
        rid = next(self.ids) if id is None else id
        fut = asyncio.get_running_loop().create_future()
        self.pending[rid] = fut
        msg = {"jsonrpc": "2.0", "method": method, "id": rid}
        if params is not None:
            msg["params"] = params
        try:
            await self.send(msg)
            return await asyncio.wait_for(fut, STEP)
        finally:
            self.pending.pop(rid, None)

    async def batch(self, messages):
        """Sends `messages` as one array; returns the responses to its calls."""
        loop = asyncio.get_running_loop()
        futs = {}
        for m in messages:
            if "id" in m:
                futs[m["id"]] = self.pending[m["id"]] = loop.create_future()
        try:
            await self.send(messages)
            return [await asyncio.wait_for(f, STEP) for f in futs.values()]
        finally:
            for i in futs:
                self.pending.pop(i, None)

    # -- this side's methods --

    async def method(self, name, params):
        if name == "py.add":
            if isinstance(params, list) and len(params) == 2:
                a, b = params
            elif isinstance(params, dict) and set(params) == {"a", "b"}:
                a, b = params["a"], params["b"]
            else:
                raise invalid_params("expected [a, b] or {a, b}")
            if type(a) is not int or type(b) is not int:
                raise invalid_params("a and b must be integers")
            return a + b
        if name == "py.echo":
            return params
        if name == "py.hello":
            if params is not None:
                raise invalid_params("py.hello takes no params")
            return "hi"
        if name == "py.fail":
            raise RpcError(-32042, "python says no", {"why": "asked to", "list": [1, 2]}, True)
        if name == "py.notes":
            count = params["count"]
            while len(self.notes) < count:
                waiter = asyncio.get_running_loop().create_future()
                self.note_waiters.append(waiter)
                await asyncio.wait_for(waiter, STEP)
            return list(self.notes)
        if name == "py.call_rust":
            # Calls the Rust client back while its own call to us waits.
            (who,) = params
            await self.send({"jsonrpc": "2.0", "method": "rust.note", "params": {"from": who}})
            greeting = await self.call("rust.greet", [who])
            answer = await self.call("rust.fail")
            if "error" not in answer:
                problem(f"rust.fail answered without an error: {answer!r}")
            return {"greeting": greeting.get("result"), "error": answer.get("error")}
        if name == "py.call_rust_batch":
            answers = await self.batch(
                [
                    {"jsonrpc": "2.0", "method": "rust.add", "params": [2, 3], "id": "b1"},
                    {"jsonrpc": "2.0", "method": "rust.greet", "params": ["batch"], "id": "b2"},
                    {"jsonrpc": "2.0", "method": "rust.note", "params": ["in a batch"]},
                    {"jsonrpc": "2.0", "method": "rust.nope", "id": "b3"},
                ]
            )
            return sorted(answers, key=lambda a: a["id"])
        raise RpcError(-32601, "Method not found")

    async def notification(self, name, params):
        if name == "py.note":
            self.notes.append(params)
            for waiter in self.note_waiters:
                if not waiter.done():
                    waiter.set_result(None)
            self.note_waiters.clear()

    # -- frames in --

    async def answer(self, m):
        """The response to one request object, or None for a notification/response."""
        if "method" not in m:
            # A response to one of our calls (strictness was checked on arrival).
            fut = self.pending.get(m.get("id"))
            if fut is None or fut.done():
                problem(f"a response to no call of ours: {m!r}")
            else:
                fut.set_result(m)  # the caller reads `result` or `error` itself
            return None
        params = m.get("params")
        if "id" not in m:
            await self.notification(m["method"], params)
            return None
        try:
            result = await self.method(m["method"], params)
            return {"jsonrpc": "2.0", "result": result, "id": m["id"]}
        except RpcError as e:
            return {"jsonrpc": "2.0", "error": e.to_json(), "id": m["id"]}
        except Exception as e:  # a bug here: answer as the spec says, and fail the run
            problem(f"{m['method']} raised {e!r}")
            return {"jsonrpc": "2.0", "error": {"code": -32603, "message": "Internal error"}, "id": m["id"]}

    async def on_frame(self, msg):
        if isinstance(msg, bytes):
            problem("the Rust side sent a binary frame")
            return
        try:
            data = json.loads(msg, parse_constant=reject_constant)
        except ValueError as e:
            problem(f"the Rust side sent invalid JSON ({e}): {msg}")
            return
        items = data if isinstance(data, list) else [data]
        if isinstance(data, list) and not data:
            problem("the Rust side sent an empty array")
        for item in items:
            for p in strict_problems(item):
                problem(f"not strict JSON-RPC 2.0: {p} in {msg}")
        if any(not isinstance(i, dict) for i in items):
            return
        if isinstance(data, list):
            answers = [a for a in await asyncio.gather(*(self.answer(i) for i in items)) if a]
            if answers:
                await self.send(answers)  # an array, even of one (the spec's way)
        else:
            a = await self.answer(data)
            if a:
                await self.send(a)

    async def serve(self):
        async for msg in self.ws:
            log(f"<-- {msg!r}" if isinstance(msg, bytes) else f"<-- {msg}")
            # Requests run concurrently: a method may wait for the Rust side's answer,
            # which arrives on this same loop.
            task = asyncio.create_task(self.on_frame(msg))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        log(f"connection closed: {self.ws.close_code} {self.ws.close_reason}")
        for task in list(self.tasks):
            task.cancel()


async def main():
    done = asyncio.get_running_loop().create_future()

    async def handler(ws):
        try:
            await Connection(ws).serve()
        except Exception as e:
            problem(f"connection failed: {e!r}")
        finally:
            if not done.done():
                done.set_result(None)

    async with serve(handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        log(f"listening on ws://127.0.0.1:{port}")
        try:
            await asyncio.wait_for(done, 60)
        except asyncio.TimeoutError:
            problem("no connection came and went within 60 s")
    log(f"server done; problems: {len(problems)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
