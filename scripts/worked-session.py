#!/usr/bin/env python3
"""The README's worked session: a real exchange with mountfs over stdio, printed as a transcript.

Creates a small project in a temporary directory, starts mountfs on it with the default table
written out (`/` = the project, `/memories/` = a SQLite store, `/scratch/` = memory), speaks
JSON-RPC to it line by line as an MCP client does, and prints each call and the text the agent
reads. The first exchange is also shown as the raw JSON-RPC lines.

Usage: scripts/worked-session.py [MOUNTFS]   (default: target/debug/mountfs)
"""

import json
import os
import subprocess
import sys
import tempfile

BINARY = sys.argv[1] if len(sys.argv) > 1 else "target/debug/mountfs"

APP = """def greet(name):
    return 'hi ' + name

print(greet('world'))
"""

CALLS = [
    ("ls", {"path": "/"}),
    ("read_file", {"file_path": "/src/app.py"}),
    ("edit_file", {"file_path": "/src/app.py", "old_string": "'hi ' + name", "new_string": "f'hello {name}'"}),
    ("grep", {"pattern": "greet", "output_mode": "content"}),
    ("write_file", {"file_path": "/memories/project.md", "content": "app.py greets with f-strings now\n"}),
    ("edit_file", {"file_path": "/docs/notes.md", "old_string": "TODO", "new_string": "DONE"}),
    ("undo_edit", {"file_path": "/src/app.py"}),
    ("read_file", {"file_path": "/src/nope.py"}),
]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        project = os.path.join(tmp, "project")
        os.makedirs(os.path.join(project, "src"))
        os.makedirs(os.path.join(project, "docs"))
        with open(os.path.join(project, "src", "app.py"), "w") as f:
            f.write(APP)
        with open(os.path.join(project, "docs", "notes.md"), "w") as f:
            f.write("# Notes\nTODO: say hello\n")
        argv = [os.path.abspath(BINARY),
                "--mount", f"/=disk:{project}",
                "--mount", f"/memories/=store:sqlite:{tmp}/memories.db",
                "--mount", "/scratch/=memory",
                "--audit", "off"]
        server = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, cwd=project)

        def send(message):
            line = json.dumps(message)
            server.stdin.write(line + "\n")
            server.stdin.flush()
            return line

        def answer(wanted):
            while True:
                line = server.stdout.readline()
                if not line:
                    raise SystemExit("mountfs closed stdout")
                message = json.loads(line)
                if message.get("id") == wanted:
                    return line.rstrip("\n"), message

        sent = send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                     "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                "clientInfo": {"name": "worked-session", "version": "1"}}})
        _, init = answer(1)
        info = init["result"]["serverInfo"]
        print(f"initialize: {info['name']} {info['version']}, protocol {init['result']['protocolVersion']}")
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        _, listed = answer(2)
        print("tools/list:", ", ".join(t["name"] for t in listed["result"]["tools"]))
        print()

        for n, (tool, arguments) in enumerate(CALLS, start=3):
            sent = send({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                         "params": {"name": tool, "arguments": arguments}})
            raw, message = answer(n)
            result = message["result"]
            if n == 3:
                print("-> " + sent)
                print("<- " + raw)
                print()
            texts = [c["text"] for c in result["content"] if c["type"] == "text"]
            print(f"> {tool} {json.dumps(arguments, ensure_ascii=False)}")
            print("\n".join(texts))
            print()
        server.stdin.close()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
