"""The agent's link client on a real grpc call: a call the trainer has ended is a link loss, not a crash."""

import asyncio

import grpc
import pytest

from protos import robot_link_pb2 as pb
from robot_agent.config import LinkConfig
from robot_agent.link import SESSION_METHOD, LinkClient, LinkLost, make_channel


async def _ends_every_call(request_iterator, context):
    context.set_code(grpc.StatusCode.RESOURCE_EXHAUSTED)
    context.set_details("trainer message too large")
    return
    yield  # an async generator: the rpc streams its responses


async def _write_after_the_trainer_ended_the_call() -> None:
    server = grpc.aio.server()
    handler = grpc.stream_stream_rpc_method_handler(_ends_every_call)
    service, method = SESSION_METHOD.strip("/").split("/")
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(service, {method: handler})])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    config = LinkConfig(server=f"127.0.0.1:{port}", insecure=True)
    link = LinkClient(config, control=None, spool=None, robot_id="r", robot_kind="k")  # type: ignore[arg-type]
    link._welcomed = True  # mid-session: the status is a loss to reconnect from, not a refusal
    try:
        async with make_channel(config) as channel:
            session = channel.stream_stream(
                SESSION_METHOD,
                request_serializer=pb.AgentMessage.SerializeToString,
                response_deserializer=pb.TrainerMessage.FromString,
            )
            call = session()
            assert await call.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # the call is over
            with pytest.raises(LinkLost, match="RESOURCE_EXHAUSTED: trainer message too large"):
                await link._send(call, pb.AgentMessage(register=pb.Register(robot_id="r")))
    finally:
        await server.stop(None)


def test_a_write_on_a_call_the_trainer_ended_is_a_link_loss_with_its_status():
    # grpc raises asyncio.InvalidStateError("RPC already finished") here; it once escaped the session
    # loop and killed the agent when the trainer ended a stream between two of the agent's writes.
    asyncio.run(_write_after_the_trainer_ended_the_call())
