#!/usr/bin/env python3
"""bench/lcpp-classify.py — issue 35's classification of the llama.cpp server tests run here (the index's file versions, 9 modules):
every test that does not pass in the after run, by class; prints pass counts of any run over the fair set.
usage: lcpp-classify.py AFTER_DIR [OTHER_DIR...] (junit xml folders of run-suite.sh; LIST=1 lists the failures)"""
import sys, re, glob, os, xml.etree.ElementTree as ET
R = [  # (module, regex, class, reason) — first match wins
 ("test_basic", r"^test_server_props$", "d", "n_ctx per slot = --ctx-size/--parallel; tokenkv's cells are shared by all requests"),
 ("test_basic", r"^test_server_slots$", "d", "n_ctx per slot (the --no-slots 501 part passes)"),
 ("test_basic", r"^test_load_split_model$", "e", "HF download of a split stories15M"),
 ("test_basic", r"^test_no_webui$", "e", "sets server.no_webui, which this utils.py version does not pass (it knows no_ui)"),
 ("test_chat_completion", r"^test_chat_completion(_stream)?\[", "d", "system_fingerprint must start with 'b' (llama.cpp build); content regexes are llama.cpp's sampler's"),
 ("test_chat_completion", r"^test_completion_with_response_format\[response_format1", "a", "tuple items: [...] in a JSON schema (400 naming response_format)"),
 ("test_chat_completion", r"^test_context_size_exceeded", "d", "llama-server's error type exceed_context_size_error and per-slot n_ctx"),
 ("test_chat_completion", r"^test_return_progress", "a", "return_progress not implemented (ignored)"),
 ("test_chat_completion", r"^test_chat_completions_multiple_choices$", "d", "content regex of llama.cpp's sampler for seed 42"),
 ("test_completion", r"^test_completion(_stream)?\[I believe", "d", "content regex of llama.cpp's sampler for seed 42"),
 ("test_completion", r"^test_completion(_stream)?\[Write a joke", "c", "expects predicted_n = min(256, server -n 64): llama-server caps at -n; here -n is a default, not a cap (issue 35)"),
 ("test_completion", r"^test_completion_with_tokens_input$", "a", "several prompts in one /completion request"),
 ("test_completion", r"^test_completion_response_fields", "a", "response_fields not implemented (400 naming it)"),
 ("test_completion", r"^test_n_probs_stream$", "a", "n_probs in a stream (400 naming n_probs)"),
 ("test_completion", r"^test_n_probs_post_sampling$", "a", "post_sampling_probs (400 naming it)"),
 ("test_ctx_shift", r"^test_ctx_shift_disabled_short_prompt\[-1-", "c", "without --context-shift a request's context is the whole --ctx-size (cells shared by every request), not n_ctx/np: n_predict -1 goes on to 248 tokens, not 120"),
 ("test_ctx_shift", r".", "a", "--context-shift refused by name; the module's shared server keeps enable_ctx_shift after the first start fails, so every test's start fails (the disabled tests also assume n_ctx/np per slot)"),
 ("test_ignore_eos", r".", "d", "expects ignore_eos as -inf logit_bias entries in generation_settings"),
 ("test_metrics", r".", "a", "llamacpp:* metric names"),
 ("test_security", r"^test_access_public_endpoint\[/models\]", "c", "the model list needs the API key here (llama-server leaves it open)"),
 ("test_security", r"^test_access_static_assets", "d", "llama.cpp's web UI files (/bundle.js, /bundle.css); '/' fails on the word 'error' in the page's HTML"),
 ("test_security", r"^test_incorrect_api_key", "d", "llama-server's error type authentication_error"),
 ("test_security", r"^test_cors_options", "d", "llama-server's default CORS (any origin, credentials, 200 preflight)"),
 ("test_security", r"^test_local_media_file", "e", "tinygemma3 multimodal model from HF"),
 ("test_template", r"^test_date_inside_prompt", "d", "llama.cpp injects date_string/functions into templates; transformers' rendering (here) does not"),
 ("test_template", r"^test_system_message_prefix", "e", "sets server.system_message_prefix, which this utils.py version does not pass"),
]
def cls(m, name, skipped_msg):
    if skipped_msg is not None:
        return ("S", "openai Python package (harness stub)") if "harness stub" in skipped_msg else ("K", "skipped by llama.cpp itself")
    for mod, rx, c, why in R:
        if mod == m and re.search(rx, name): return c, why
    return "?", "UNCLASSIFIED"
EXCL = set("deSK")
def load(d):
    out = {}
    for x in sorted(glob.glob(os.path.join(d, "*.xml"))):
        m = os.path.basename(x)[:-4]
        for tc in ET.parse(x).getroot().iter("testcase"):
            f, e, s = tc.find("failure"), tc.find("error"), tc.find("skipped")
            out[(m, tc.get("name"))] = (f is None and e is None and s is None, None if s is None else (s.get("message") or ""))
    return out
ref = load(sys.argv[1])  # the run whose classes fix the fair set (the after run)
# a test is fair unless a rule puts it in d/e (or it is skipped: S/K); a passing test with no rule is fair
fairset = {k for k, (ok, sk) in ref.items() if cls(k[0], k[1], sk)[0] not in EXCL}
counts = {}
for k, (ok, sk) in ref.items():
    if not ok:
        c, why = cls(k[0], k[1], sk); counts[c] = counts.get(c, 0) + 1
        if os.environ.get("LIST"): print(" | ".join((k[0], k[1], c, why)))
print(f"{sys.argv[1]}: collected {len(ref)}; fair set (not d/e/S/K) {len(fairset)}; non-passing by class {dict(sorted(counts.items()))}")
for d in sys.argv[1:]:
    run = load(d)
    p = sum(1 for k in fairset if run.get(k, (False,))[0])
    print(f"  {d}: passed {sum(1 for v in run.values() if v[0])} of {len(run)}; fair {p}/{len(fairset)} = {100*p/len(fairset):.1f}%")
