"""The official openai client against the server: chat and completions, streaming and not,
stop strings, logprobs, tools, thinking, errors."""
import openai
import pytest

MODEL = "tiny"
USER = [{"role": "user", "content": "Tell me a story about a lighthouse."}]


def chat(client, **kw):
    args = dict(model=MODEL, messages=USER, max_tokens=24, temperature=0)
    args.update(kw)
    return client.chat.completions.create(**args)


def stream_text(stream):
    """Concatenated content, the finish reason and every chunk of a streamed chat completion."""
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    return text, finish, chunks


def ascii_window(text, size=3):
    """A stop string taken from the middle of `text`: printable ASCII, not blank."""
    for start in range(len(text) // 3, len(text) - size):
        w = text[start:start + size]
        if all(32 <= ord(ch) < 127 for ch in w) and w.strip():
            return w
    pytest.fail(f"no ASCII window in greedy output {text!r}")


def test_models_lists_the_served_name(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]


def test_chat_greedy_is_deterministic_and_well_formed(client):
    a, b = chat(client), chat(client)
    assert a.object == "chat.completion"
    assert a.id.startswith("chatcmpl-") and a.id != b.id
    assert a.model == MODEL
    choice = a.choices[0]
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.message.content
    assert choice.finish_reason in ("length", "stop")
    assert choice.message.content == b.choices[0].message.content
    assert a.usage.completion_tokens <= 24
    assert a.usage.total_tokens == a.usage.prompt_tokens + a.usage.completion_tokens
    if choice.finish_reason == "length":
        assert a.usage.completion_tokens == 24


def test_chat_stream_equals_non_stream(client):
    whole = chat(client)
    stream = chat(client, stream=True, stream_options={"include_usage": True})
    text, finish, chunks = stream_text(stream)
    assert text == whole.choices[0].message.content
    assert finish == [whole.choices[0].finish_reason]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    assert len({c.id for c in chunks}) == 1


def test_completions_stream_and_not(client):
    args = dict(model=MODEL, prompt="The weather today is", max_tokens=16, temperature=0)
    whole = client.completions.create(**args)
    assert whole.object == "text_completion"
    assert whole.choices[0].finish_reason in ("length", "stop")
    chunks = list(client.completions.create(stream=True, **args))
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    echoed = client.completions.create(echo=True, **args)
    assert echoed.choices[0].text == "The weather today is" + whole.choices[0].text


def test_completions_accept_token_ids(client):
    ids = client.completions.create(model=MODEL, prompt=[785, 9104, 3351, 374], max_tokens=8, temperature=0)
    assert ids.usage.prompt_tokens == 4
    assert ids.usage.completion_tokens >= 1


def test_stop_string_cuts_before_it_and_never_leaks(client):
    full = chat(client, max_tokens=32).choices[0].message.content
    stop = ascii_window(full)
    expected = full[:full.index(stop)]
    cut = chat(client, max_tokens=32, stop=[stop])
    assert cut.choices[0].message.content == expected
    assert cut.choices[0].finish_reason == "stop"
    text, finish, chunks = stream_text(chat(client, max_tokens=32, stop=[stop], stream=True))
    assert text == expected
    assert finish == ["stop"]
    assert stop not in text
    # Completions endpoint, several stop strings, one that never occurs.
    prompt = dict(model=MODEL, prompt="Once upon a time", max_tokens=32, temperature=0)
    full = client.completions.create(**prompt).choices[0].text
    stop = ascii_window(full)
    cut = client.completions.create(stop=["@@never@@", stop], **prompt)
    assert cut.choices[0].text == full[:full.index(stop)]
    streamed = "".join(c.choices[0].text for c in client.completions.create(stop=[stop], stream=True, **prompt))
    assert streamed == full[:full.index(stop)]


def test_logprobs_and_top_logprobs(client):
    r = chat(client, logprobs=True, top_logprobs=3, max_tokens=12)
    entries = r.choices[0].logprobs.content
    hidden = 1 if r.choices[0].finish_reason == "stop" else 0  # the end-of-turn token has no text
    assert len(entries) == r.usage.completion_tokens - hidden
    for e in entries:
        assert len(e.top_logprobs) == 3
        lps = [t.logprob for t in e.top_logprobs]
        assert lps == sorted(lps, reverse=True)
        assert e.logprob <= 0.0
        # Greedy: the chosen token is the most likely one.
        assert e.token == e.top_logprobs[0].token
        assert e.logprob == pytest.approx(e.top_logprobs[0].logprob, abs=1e-5)
    content = r.choices[0].message.content
    if "\ufffd" not in content:
        assert b"".join(bytes(e.bytes) for e in entries).decode() == content
    # Streaming carries the same entries.
    chunks = list(chat(client, logprobs=True, top_logprobs=3, max_tokens=12, stream=True))
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [(e.token, round(e.logprob, 4)) for e in streamed] == [(e.token, round(e.logprob, 4)) for e in entries]
    # Completions: logprobs=N.
    c = client.completions.create(model=MODEL, prompt="Hello", max_tokens=6, temperature=0, logprobs=2)
    lp = c.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset)
    assert all(len(t) <= 2 for t in lp.top_logprobs)


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def test_tools_are_rendered_and_response_is_well_formed(client):
    plain = chat(client, max_tokens=8)
    with_tools = chat(client, max_tokens=8, tools=TOOLS, tool_choice="auto")
    # The template put the tool's JSON schema into the prompt.
    assert with_tools.usage.prompt_tokens > plain.usage.prompt_tokens + 20
    choice = with_tools.choices[0]
    assert choice.finish_reason in ("stop", "length", "tool_calls")
    for call in choice.message.tool_calls or []:
        assert call.type == "function" and call.id.startswith("call_")
    none = chat(client, max_tokens=8, tools=TOOLS, tool_choice="none")
    assert none.usage.prompt_tokens == plain.usage.prompt_tokens
    # A conversation with an earlier tool call and its result renders and runs.
    history = USER + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "rain, 4 C"}]
    r = chat(client, messages=history, tools=TOOLS, max_tokens=4, stream=True)
    assert stream_text(r)[1][0] in ("stop", "length", "tool_calls")


def test_enable_thinking_changes_the_prompt(client):
    on = chat(client, max_tokens=4, extra_body={"chat_template_kwargs": {"enable_thinking": True}})
    off = chat(client, max_tokens=4, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    # Qwen3's template closes an empty <think></think> block when thinking is off.
    assert off.usage.prompt_tokens > on.usage.prompt_tokens
    assert hasattr(off.choices[0].message, "reasoning_content")


def test_penalties_and_sampling_parameters_are_accepted(client):
    r = chat(client, temperature=0.8, top_p=0.9, seed=7, max_tokens=8, presence_penalty=0.5,
             frequency_penalty=0.5, extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.2})
    again = chat(client, temperature=0.8, top_p=0.9, seed=7, max_tokens=8, presence_penalty=0.5,
                 frequency_penalty=0.5, extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.2})
    assert r.choices[0].message.content == again.choices[0].message.content  # same seed, same text


def test_errors_come_back_as_openai_errors(client):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, max_tokens=-1)
    assert e.value.status_code == 400 and e.value.body["param"] == "max_tokens"
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, max_tokens=10**6)
    assert e.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.NotFoundError) as e:
        chat(client, model="gpt-4")
    assert e.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, messages=[{"role": "user", "content": "word " * 2000}], max_tokens=4)
    assert e.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, n=2)
    assert e.value.body["param"] == "n"
    with pytest.raises(openai.BadRequestError):
        chat(client, stop=["a", "b", "c", "d", "e"])
    with pytest.raises(openai.BadRequestError):
        chat(client, logprobs=True, top_logprobs=21)
    with pytest.raises(openai.BadRequestError):
        chat(client, messages=[])
    with pytest.raises(openai.BadRequestError):
        chat(client, temperature=5)
