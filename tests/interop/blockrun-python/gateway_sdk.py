"""Drives the walletgate reference gateway with the real BlockRun Python SDK.

Run by the gateway example's `python_sdk` test, which starts the server on
loopback and passes:

  GATEWAY_API_URL       http://127.0.0.1:<port>/api
  BLOCKRUN_WALLET_KEY   a PUBLIC Hardhat/Anvil development key (never printed)
  HOME                  a scratch folder (the SDK writes ~/.blockrun)

Prints one JSON line of results on success; any failure raises.
"""

import json
import os
import sys

from blockrun_llm import ImageClient, LLMClient

PAID_MODEL = "anthropic/claude-sonnet-4.6"
STREAM_MODEL = "openai/gpt-5-mini"
FREE_MODEL = "nvidia/nemotron-super"
IMAGE_MODEL = "openai/dall-e-3"


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def main():
    api_url = os.environ["GATEWAY_API_URL"]
    key = os.environ["BLOCKRUN_WALLET_KEY"]
    client = LLMClient(private_key=key, api_url=api_url)
    results = {"payer": client.get_wallet_address()}

    models = client.list_models()
    ids = {model["id"] for model in models}
    check({PAID_MODEL, STREAM_MODEL, FREE_MODEL, IMAGE_MODEL} <= ids, f"listing: {sorted(ids)}")
    image_rows = [model for model in models if "image" in model.get("categories", [])]
    check(any(row["id"] == IMAGE_MODEL and row["billing_mode"] == "per_image" for row in image_rows),
          f"image rows: {image_rows}")
    results["models"] = len(models)

    answer = client.chat(PAID_MODEL, "hello from python", max_tokens=32)
    check("hello from python" in answer, f"paid answer: {answer!r}")
    spending = client.get_spending()
    check(spending["calls"] == 1 and spending["total_usd"] > 0, f"spending: {spending}")
    results["paid_cost_usd"] = spending["total_usd"]

    pieces = []
    for chunk in client.chat_completion_stream(
        STREAM_MODEL, [{"role": "user", "content": "stream this please"}], max_tokens=16
    ):
        for choice in chunk.choices:
            if choice.delta and choice.delta.content:
                pieces.append(choice.delta.content)
    streamed = "".join(pieces)
    check("stream this please" in streamed, f"streamed: {streamed!r}")
    results["streamed"] = streamed

    free = client.chat(FREE_MODEL, "free hello")
    check("free hello" in free, f"free answer: {free!r}")
    results["free_answer"] = free
    results["spending"] = client.get_spending()

    images = ImageClient(private_key=key, api_url=api_url)
    image = images.generate("a red fox in the snow", model=IMAGE_MODEL, size="1024x1024")
    check(len(image.data) == 1, f"images: {image}")
    check(image.data[0].url.startswith("data:image/"), "image url is a data URL")
    results["image_created"] = image.created

    print(json.dumps(results))


if __name__ == "__main__":
    try:
        main()
    except Exception as error:  # the test shows the reason; never the key
        print(f"gateway_sdk.py failed: {type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(1)
