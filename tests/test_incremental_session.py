"""A long session's incremental path (history converted once, checked by samples) sends what a cold
packer would convert, through a real Runner; a rewind makes the next call check every content."""

from __future__ import annotations

from google.adk.agents import LlmAgent
from google.adk.plugins.base_plugin import BasePlugin

from aether_context import ContextPackPlugin
from aether_context.adk.convert import request_from_llm
from aether_context.testing import ScriptedLlm, call

from conftest import lookup, make_runner, new_session, run_turn


class Witness(BasePlugin):
    """Placed before the pack plugin: converts each request as it comes in, with no cache (what an
    empty process sees), and checks the packer's own conversion of it once the model answered."""

    def __init__(self, plugin: ContextPackPlugin):
        super().__init__(name="witness")
        self.plugin, self.fresh, self.checked, self.grown = plugin, None, [], []

    async def before_model_callback(self, *, callback_context, llm_request):
        self.fresh = request_from_llm(llm_request).messages
        self.grown.append(self.plugin.packer.slot(callback_context).times.only_grew(callback_context.session.events)
                          if self.plugin.packer.slot(callback_context).times else False)

    async def after_model_callback(self, *, callback_context, llm_response):
        pack = self.plugin.packer.slot(callback_context).last
        self.checked.append(pack is not None and pack.inputs.request.messages == self.fresh)


def _script(rounds: int) -> list:
    turns = []
    for i in range(rounds):
        turns += [call("lookup", key=f"k{i}"), call("lookup", key=f"j{i}"), f"done {i}"]
    return turns


async def test_a_growing_session_converts_as_a_cold_packer_and_a_rewind_checks_everything(memory_store_url):
    llm = ScriptedLlm(turns=_script(12))
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=4_000)
    witness = Witness(plugin)
    runner = make_runner(LlmAgent(name="worker", model=llm, instruction="Work.", tools=[lookup]),
                         plugins=[witness, plugin])
    sid = await new_session(runner)
    invocations = []
    for i in range(6):
        events = await run_turn(runner, sid, f"Look up keys round {i}.")
        invocations.append(events[0].invocation_id)
    assert len(witness.checked) == 18 and all(witness.checked)
    assert sum(witness.grown) >= 15  # the sampled check served the calls after the first
    await runner.rewind_async(user_id="u", session_id=sid, rewind_before_invocation_id=invocations[3])
    for i in range(3):
        await run_turn(runner, sid, f"After the rewind, round {i} again with other words.")
    assert len(witness.checked) == 27 and all(witness.checked)
    assert witness.grown[18] is False  # the rewind event: every content checked
