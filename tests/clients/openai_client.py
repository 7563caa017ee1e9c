"""Drives a Strata engine server with the official `openai` Python package, unchanged.

Usage: python3 openai_client.py BASE_URL MODEL API_KEY
Exits non-zero (with the failing assertion) when any call does not behave as the API defines.
"""

import sys

import openai


def main() -> None:
    base_url, model, api_key = sys.argv[1], sys.argv[2], sys.argv[3]
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)

    listed = [m.id for m in client.models.list()]
    assert model in listed, listed

    chat = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Name a color."}],
        max_tokens=8,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
    )
    choice = chat.choices[0]
    assert chat.object == "chat.completion"
    assert choice.message.role == "assistant"
    assert choice.finish_reason in ("stop", "length"), choice.finish_reason
    assert chat.usage.completion_tokens >= 1
    assert chat.usage.total_tokens == chat.usage.prompt_tokens + chat.usage.completion_tokens
    assert len(choice.logprobs.content) == chat.usage.completion_tokens
    assert len(choice.logprobs.content[0].top_logprobs) == 2

    pieces, usage, finish = [], None, None
    for chunk in client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Name a color."}],
        max_tokens=8,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    ):
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.content:
                pieces.append(c.delta.content)
            if c.finish_reason:
                finish = c.finish_reason
    assert "".join(pieces) == choice.message.content, (pieces, choice.message.content)
    assert finish == choice.finish_reason
    assert usage is not None and usage.completion_tokens == chat.usage.completion_tokens

    completion = client.completions.create(
        model=model, prompt="The capital of France is", max_tokens=6, temperature=0
    )
    assert completion.object == "text_completion"
    text = completion.choices[0].text
    assert completion.usage.completion_tokens >= 1

    streamed = "".join(
        c.choices[0].text
        for c in client.completions.create(
            model=model, prompt="The capital of France is", max_tokens=6, temperature=0, stream=True
        )
        if c.choices
    )
    assert streamed == text, (streamed, text)

    try:
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
        raise AssertionError("an unknown model must be refused")
    except openai.NotFoundError as e:
        assert "no-such-model" in str(e)
    try:
        client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "x"}], max_tokens=10**6
        )
        raise AssertionError("a request beyond the context must be refused")
    except openai.BadRequestError as e:
        assert "context length" in str(e)
    print("openai client: ok")


if __name__ == "__main__":
    main()
