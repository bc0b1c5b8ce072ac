"""The user's own traffic (issue 40): a JSONL of the requests their logs hold, replayed by a benchmark as written,
and acceptance read per category and per sampling setting.

- ``requests``: one line of the file as a request (OpenAI chat or completion body, a batch-API line, or a log record
  holding the request), validated with its place (file:line:col);
- ``acceptance``: the per-request accept lengths of a replay grouped by category and by sampling setting, each group
  with its 95% interval (an accept length is at least 1), "too few requests" where a group cannot be told apart.
"""
