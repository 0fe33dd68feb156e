"""The JSON objects among a program's output lines (the GPU benchmark scripts' workloads print one
per line between other text)."""
import json


def json_lines(text):
    for line in text.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            yield obj
