"""SGLang (``sglang serve --dp 2``) as its source builds it (sgl-project/sglang, 2026-12):

- python/sglang/srt/entrypoints/engine.py ``_launch_subprocesses``: the launcher (process
  0, the HTTP server and tokenizer manager) starts, with ``--dp`` > 1, one
  ``run_data_parallel_controller_process`` and one ``run_detokenizer_process`` as
  ``mp.Process``: same process group, same session.
- managers/data_parallel_controller.py: ``setproctitle("sglang::data_parallel_controller")``,
  ``kill_itself_when_parent_died()``; it starts a scheduler per DP rank.
- managers/scheduler.py ``run_scheduler_process``: ``setproctitle(f"sglang::scheduler
  {prefix.replace(' ', '_')}")`` with prefix `` DP{d}`` `` TP{t}`` (TP only when
  tp_size > 1); ``kill_itself_when_parent_died()`` is commented out in the versions where
  it "does not work for `--dp 2`": the schedulers outlive their controller (#23627).
- managers/detokenizer_manager.py: ``setproctitle("sglang::detokenizer")``, PDEATHSIG.
- utils/common.py ``kill_itself_when_parent_died``: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``.
- entrypoints/http_server.py: ``The server is fired up and ready to roll!`` once warm.

Words: ``sglang serve --model-path M --dp N --mib MIB``.
"""

from __future__ import annotations

from standins.base import die_with_parent, forever, fork, hold, main_of, say, set_title


def _scheduler(dp: int, mib: int) -> None:
    set_title(f"sglang::scheduler_DP{dp}")
    say(f"[DP{dp}] Load weight begin. avail mem=79.10 GB")
    hold(dp, mib)
    say(f"[DP{dp}] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16")
    forever()


def _controller(dp: int, mib: int) -> None:
    set_title("sglang::data_parallel_controller")
    die_with_parent()
    for rank in range(dp):
        fork(_scheduler, rank, mib)
    forever()


def _detokenizer() -> None:
    die_with_parent()
    set_title("sglang::detokenizer")
    forever()


def serve(words: list[str]) -> None:
    dp = int(words[words.index("--dp") + 1]) if "--dp" in words else 1
    mib = int(words[words.index("--mib") + 1]) if "--mib" in words else 1000
    fork(_controller, dp, mib)
    fork(_detokenizer)
    say("INFO:     Application startup complete.")
    say("The server is fired up and ready to roll!")
    forever()


def main(program: str) -> None:
    main_of({"serve": serve})
