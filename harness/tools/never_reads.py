"""A client that never reads, measured from outside the server (issue 11, item 5).

Connects to a jsonrpc-peer server (for example `cargo run --release --example spec_server
-- --listen 127.0.0.1:9000`), sends `get_data` calls whose ids are 128 KiB strings (so
each answer is 128 KiB) without ever reading, until a write blocks for 3 s, then prints
how much the server process grew (VmRSS from /proc/PID/status). Plain Python 3, no
packages:

    python3 harness/tools/never_reads.py 127.0.0.1 9000 $(pgrep -f spec_server)
"""
import socket, sys, os, json, time, base64
host, port, pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def rss(pid):
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS:"): return int(l.split()[1])
s = socket.create_connection((host, port))
s.sendall(f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n".encode())
head=b""
while not head.endswith(b"\r\n\r\n"): head+=s.recv(1)
assert head.startswith(b"HTTP/1.1 101"), head
def frame(payload):
    n=len(payload); h=bytearray([0x81])
    if n<126: h.append(0x80|n)
    elif n<65536: h.append(0x80|126); h+=n.to_bytes(2,'big')
    else: h.append(0x80|127); h+=n.to_bytes(8,'big')
    h+=b"\0\0\0\0"; return bytes(h)+payload
before=rss(pid)
s.settimeout(3)
sent=0
try:
    for i in range(20000):
        idv = ("%06d" % i) + "x"*(128*1024)
        s.sendall(frame(json.dumps({"jsonrpc":"2.0","method":"get_data","id":idv}).encode()))
        sent+=1
except socket.timeout:
    pass
time.sleep(1)
after=rss(pid)
print(f"calls sent before the server stopped reading: {sent}; server VmRSS {before} KiB -> {after} KiB (+{after-before} KiB)")
