"""Run records end to end: prompts and a continue with metadata against a real
agentd, the faux model scripted to answer the first run and fail the next,
then get_run and list_runs (newest first, filtered and paged)."""

from __future__ import annotations

import unittest
from datetime import datetime, timedelta, timezone

import grpc

import agentd_client  # noqa: F401  (puts gen/python on the path)
from agentd.v1 import content_pb2, events_pb2, messages_pb2, service_pb2, session_pb2
from agentd_client import refusal_of

from tests.agentd_server import AgentdTestCase
from tests.scripts import text


def failed(message: str) -> messages_pb2.AssistantMessage:
    """A failed answer; its message matches none of the retryable patterns, so
    the run ends ERROR at once."""
    return messages_pb2.AssistantMessage(stop_reason=content_pb2.STOP_REASON_ERROR, error_message=message)


async def collect(stream) -> list:
    return [e async for e in stream]


def ids(response: service_pb2.ListRunsResponse) -> list:
    return [r.id for r in response.runs]


class RunRecordsE2E(AgentdTestCase):
    def echoed(self, events: list) -> tuple:
        """(agent_start's metadata, agent_end's metadata, the run id), checking
        that they open and close the stream."""
        self.assertEqual(events[0].WhichOneof("event"), "agent_start")
        self.assertEqual(events[-1].WhichOneof("event"), "agent_end")
        return dict(events[0].agent_start.metadata), dict(events[-1].agent_end.metadata), events[0].run_id

    async def test_metadata_is_stored_and_runs_are_listed_newest_first(self) -> None:
        script = session_pb2.FauxScript(responses=[text("Nightly report ready."),
                                                   failed("scripted failure: bad request")])
        session = await self.client.create_session(session_pb2.SessionConfig(faux=script))

        nightly = {"job": "nightly", "attempt": "1"}
        start, end, first = self.echoed(await collect(
            self.client.prompt(session.id, "Write the nightly report.", metadata=nightly)))
        self.assertEqual((start, end), (nightly, nightly))

        adhoc = {"job": "adhoc"}
        events = await collect(self.client.prompt(session.id, "And an ad-hoc one.", metadata=adhoc))
        start, end, second = self.echoed(events)
        self.assertEqual((start, end), (adhoc, adhoc))
        self.assertEqual(events[-1].agent_end.outcome, events_pb2.RUN_OUTCOME_ERROR)

        # Continue retries the failed answer (the script fails it again) with metadata of its own.
        retry = {"job": "adhoc", "attempt": "2"}
        start, end, third = self.echoed(await collect(self.client.continue_run(session.id, metadata=retry)))
        self.assertEqual((start, end), (retry, retry))

        every = await self.client.list_runs(session.id)
        self.assertEqual(ids(every), [third, second, first], "newest first")
        self.assertEqual(every.next_page_token, "")

        self.assertEqual(ids(await self.client.list_runs(session.id, metadata_filter={"job": "nightly"})), [first])
        self.assertEqual(ids(await self.client.list_runs(session.id, metadata_filter={"attempt": ""})), [third, first],
                         "an empty value matches any value of the key")
        self.assertEqual(ids(await self.client.list_runs(session.id, outcomes=[events_pb2.RUN_OUTCOME_ERROR])),
                         [third, second])

        # datetime has microseconds: the first run started at or after its own start truncated to them.
        started = every.runs[2].start_time
        first_start = datetime.fromtimestamp(started.seconds, timezone.utc) + timedelta(microseconds=started.nanos // 1000)
        self.assertEqual(len((await self.client.list_runs(session.id, start_time_after=first_start)).runs), 3)
        self.assertEqual(len((await self.client.list_runs(session.id, start_time_before=first_start)).runs), 0)
        later = datetime.now(timezone.utc) + timedelta(hours=1)
        self.assertEqual(len((await self.client.list_runs(session.id, start_time_after=later)).runs), 0)

        page1 = await self.client.list_runs(session.id, page_size=2)
        self.assertEqual(ids(page1), [third, second])
        self.assertNotEqual(page1.next_page_token, "")
        page2 = await self.client.list_runs(session.id, page_size=2, page_token=page1.next_page_token)
        self.assertEqual(ids(page2), [first])
        self.assertEqual(page2.next_page_token, "")

        done = await self.client.get_run(session.id, first)
        self.assertEqual((done.id, done.session_id), (first, session.id))
        self.assertEqual(done.outcome, events_pb2.RUN_OUTCOME_COMPLETED)
        self.assertEqual(done.error_message, "")
        self.assertEqual(done.request.method, "prompt")
        self.assertEqual(dict(done.request.metadata), nightly)
        for name in ("start_time", "end_time", "usage"):
            self.assertTrue(done.HasField(name), f"{name} is set once the run ended")

        broke = await self.client.get_run(session.id, second)
        self.assertEqual(broke.outcome, events_pb2.RUN_OUTCOME_ERROR)
        self.assertIn("scripted failure: bad request", broke.error_message)
        self.assertEqual(dict(broke.request.metadata), adhoc)

        continued = await self.client.get_run(session.id, third)
        self.assertEqual(continued.request.method, "continue")
        self.assertEqual(dict(continued.request.metadata), retry)

    async def test_get_run_of_an_unknown_run_is_not_found(self) -> None:
        session = await self.client.create_session(session_pb2.SessionConfig(faux=session_pb2.FauxScript(echo=True)))
        with self.assertRaises(grpc.aio.AioRpcError) as caught:
            await self.client.get_run(session.id, "run-nope")
        self.assertEqual(caught.exception.code(), grpc.StatusCode.NOT_FOUND)
        refusal = refusal_of(caught.exception)
        self.assertIsNotNone(refusal)
        self.assertEqual(refusal.reason, service_pb2.ERROR_REASON_RUN_NOT_FOUND)


if __name__ == "__main__":
    unittest.main()
