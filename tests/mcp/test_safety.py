"""The MCP server's safety rules, over a real stdio connection: secrets never reach a tool result, the exec
policy refuses what it does not allow (and says how to allow it), bad arguments are tool errors that leave
the server serving, and run_playbook streams progress notifications."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.session.reader import read_session
from tests.mcp.conftest import call, mcp_client, only_session, server_env, text_of

HERE = Path(__file__).resolve().parent
SECRET = "s3cr3t-Value-9f2e"  # from the environment into the playbook's secret var
EXTRA_SECRET = "xtra-hf-7c1d55"  # an -e var with a secret-looking name


async def test_secrets_policy_bad_arguments_and_progress(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    victim = tmp_path / "keep-me.txt"
    victim.write_text("still here\n")
    args = ["-i", str(HERE / "inventory.yaml"), "--playbook", str(HERE / "small.yaml"), "--sessions-dir", str(sessions),
            "-e", f"hf_token={EXTRA_SECRET}"]
    results: list[str] = []
    async with mcp_client(args, cwd=tmp_path, env=server_env(ORCH_TEST_SECRET=SECRET)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert {"read_source", "exec", "probe", "server_start", "server_stop", "server_bench", "draft_test",
                "hypotheses_list", "hypothesis_verdict", "note", "run_playbook", "report"} <= set(tools)
        assert tools["exec"].output_schema and "rc" in tools["exec"].output_schema["properties"]

        # secrets: in a command's output, in an environment variable, in a playbook step's output
        for command in (f"echo {SECRET} {EXTRA_SECRET}", "printenv ORCH_TEST_SECRET"):
            result = await client.call_tool("exec", {"command": command})
            assert not result.is_error, text_of(result)
            results.append(text_of(result) + json.dumps(result.structured_content))
        assert "***" in results[0] and "***" in results[1]

        progress: list[tuple[float, float | None, str | None]] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append((done, total, message))

        run = await client.call_tool("run_playbook", {}, progress_callback=on_progress)
        assert not run.is_error, text_of(run)
        results.append(text_of(run) + json.dumps(run.structured_content))
        assert run.structured_content["status"] == "ok"
        assert [s["step_id"] for s in run.structured_content["steps"]] == ["s1", "s2"]
        assert [(d, t) for d, t, _ in progress] == [(1, 2), (2, 2)]
        assert progress[1][2] == "s2 the secret, echoed: ok"
        again = await client.call_tool("run_playbook", {})
        assert again.is_error and "already ran" in text_of(again)

        # the exec policy: not read-only -> refused, with the way out; the inventory's deny and allow rules
        refused = await client.call_tool("exec", {"command": f"rm -f {victim}"})
        assert refused.is_error and "--allow-exec" in text_of(refused)
        assert victim.read_text() == "still here\n"
        denied = await client.call_tool("exec", {"argv": ["cat", "/etc/hostname"]})
        assert denied.is_error and "denied by the exec policy" in text_of(denied)
        allowed = await call(client, "exec", command="python3 -c 'print(6 * 7)'")
        assert allowed["stdout"] == "42\n" and allowed["rc"] == 0
        read_only = await call(client, "exec", command=f"cat {victim} | wc -l 2>/dev/null")
        assert read_only["stdout"].strip() == "1"
        templated = await client.call_tool("exec", {"command": "echo {{ api_secret }}"})
        assert templated.is_error and "not expanded" in text_of(templated)

        # bad arguments: tool errors naming the problem; the server keeps serving
        for tool, arguments, expected in [
            ("read_source", {"context": "many"}, "context"),
            ("read_source", {"package": "no_such_package_here", "file": "x.py", "address": "1,2"}, "read_source failed"),
            ("exec", {}, "give `command`"),
            ("exec", {"command": "ls", "argv": ["ls"]}, "not both"),
            ("hypothesis_verdict", {"hypothesis_id": "nope", "state": "refuted", "because": "x"}, "unknown hypothesis"),
            ("hypothesis_verdict", {"hypothesis_id": "answer_ok", "state": "maybe", "because": "x"}, "state"),
            ("probe", {"name": "rm_everything"}, "name"),
            ("server_stop", {"name": "never-started"}, "never-started"),
            ("exec", {"command": "ls", "host": "gpu9"}, "unknown host or group 'gpu9'"),
        ]:
            result = await client.call_tool(tool, arguments)
            message = text_of(result)
            if tool == "server_stop":  # a step that ran and failed: recorded, reported in the result
                assert result.structured_content["status"] == "failed", message
                message = result.structured_content["error"] or ""
            else:
                assert result.is_error, (tool, arguments, message)
            assert expected in message, (tool, message)
            assert "Traceback" not in message
        board = await call(client, "hypotheses_list")
        assert [(h["id"], h["state"]) for h in board["hypotheses"]] == [("answer_ok", "supported")]
        report = await call(client, "report")
        results.append(json.dumps(report))
        for uri in ("orchestrator://session/report", "orchestrator://session/events"):
            resource = await client.read_resource(uri)
            results.append("".join(getattr(c, "text", "") for c in resource.contents))
        schema = await client.read_resource("orchestrator://playbook/schema")
        assert "steps" in json.loads(schema.contents[0].text)["properties"]

    for text in results:
        assert SECRET not in text and EXTRA_SECRET not in text
    directory = only_session(sessions)
    for path in directory.rglob("*"):
        if path.is_file():
            content = path.read_text(errors="replace")
            assert SECRET not in content and EXTRA_SECRET not in content, path
    loaded = read_session(directory)
    assert loaded.finished is not None and loaded.finished.status == "ok"
    adhoc = [e for e in loaded.of_type("step_started") if e.section == "adhoc"]
    assert adhoc and {e.author for e in adhoc} == {"mcp"}
    refusals = [n.text for n in loaded.of_type("note_added") if n.author == "mcp"]
    assert any("exec refused" in t and "rm -f" in t for t in refusals)
