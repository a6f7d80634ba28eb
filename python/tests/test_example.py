"""examples/prefix_service.py answers as examples/prefix_service.c does, line for line."""
import json
import os
import subprocess
import sys

from conftest import REPO, STORIES

EXAMPLE_BIN = os.environ.get("TKV_EXAMPLE_BIN") or os.path.join(REPO, "build", "tokenkv-example-service")
REQUESTS = [
    {"session": "alice", "prompt": "Once upon a time there was a girl", "max_tokens": 12},
    {"session": "bob", "prompt": "Once upon a time there was a boy", "max_tokens": 8},
    {"session": "alice", "prompt": "Once upon a time there was a girl named Lily. She", "max_tokens": 10},
    {"session": "carol", "tokens": [1, 403, 9999], "max_tokens": 4},
    {"session": "bob", "prompt": "Once upon a time there was a boy who liked", "max_tokens": 6,
     "abort_after_layers": 3},
    {"session": "bob", "prompt": "Once upon a time there was a boy who liked", "max_tokens": 6},
    {"session": "dave", "max_tokens": 3},
    {"prompt": "x"},
    {"session": "erin", "prompt": "The sun", "max_tokens": -1},
    {"session": "erin", "tokens": [1, 403, 407], "max_tokens": 0},
]


def _run(cmd):
    stdin = "".join(json.dumps(r) + "\n" for r in REQUESTS)
    out = subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=True, timeout=300).stdout
    lines = [json.loads(line) for line in out.splitlines()]
    for line in lines:
        line.pop("ms", None)
    return lines


def test_python_service_answers_as_the_c_one():
    c = _run([EXAMPLE_BIN, "-m", STORIES, "-t", "1"])
    py = _run([sys.executable, os.path.join(REPO, "examples", "prefix_service.py"), "-m", STORIES, "-t", "1"])
    assert len(c) == len(REQUESTS) + 1
    assert py == c
    assert py[-1]["summary"]["check"] == "TKV_OK" and py[2]["reused_tokens"] > 0
