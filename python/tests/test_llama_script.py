"""A llama-cpp-python chat script, unchanged but for its import, on a model with its own
chat template (written by `tokenkv mkmodel --chat-template`)."""
import subprocess
import sys

import pytest

from conftest import STORIES, TKV_BIN

TEMPLATE = ("{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{{ eos_token }}{% endfor %}"
            "{% if add_generation_prompt %}[assistant]{% endif %}")

# what a llama-cpp-python user writes (only the import changed)
SCRIPT = '''
import sys
from tokenkv import Llama

llm = Llama(model_path=sys.argv[1], n_ctx=2048, n_threads=2, seed=42, verbose=False)
messages = [{"role": "system", "content": "You are a storyteller."}]
for question in ["Tell me about a cat.", "And then what happened?", "How did it end?"]:
    messages.append({"role": "user", "content": question})
    out = llm.create_chat_completion(messages=messages, max_tokens=24, temperature=0.7)
    reply = out["choices"][0]["message"]
    messages.append({"role": reply["role"], "content": reply["content"]})
    usage = out["usage"]
    print(usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"], usage["completion_tokens"])
for chunk in llm.create_chat_completion(messages=messages, max_tokens=8, stream=True):
    delta = chunk["choices"][0]["delta"]
    if "content" in delta:
        sys.stdout.write("")
print("done")
'''


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("chat")
    (d / "t.jinja").write_text(TEMPLATE)
    path = d / "chat.gguf"
    subprocess.run([TKV_BIN, "mkmodel", str(path), "--dim", "64", "--layers", "2", "--heads", "4", "--ff", "128",
                    "--vocab-from", STORIES, "--chat-template", str(d / "t.jinja")], check=True, capture_output=True)
    return str(path)


def test_a_chat_script_runs_and_reuses_each_turn(chat_model, tmp_path):
    (tmp_path / "chat.py").write_text(SCRIPT)
    out = subprocess.run([sys.executable, str(tmp_path / "chat.py"), chat_model], capture_output=True, text=True,
                         check=True, timeout=300).stdout.split("\n")
    turns = [tuple(map(int, line.split())) for line in out[:3]]
    assert out[3] == "done"
    assert turns[0][1] == 0
    for (p0, _, c0), (p1, cached1, _) in zip(turns, turns[1:]):
        # the next turn's prompt repeats this one's and its answer: all of the prompt is reused,
        # and of the answer all but its last token (never decoded) unless the template's
        # re-tokenization of the reply's text differs from the sampled tokens
        assert p0 - 1 <= cached1 < p1
    assert turns[1][1] >= turns[0][0] - 1
