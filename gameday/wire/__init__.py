"""The agent API's wire, shared by both ends and owned by neither: the vocabulary of
requests and answers (:mod:`gameday.wire.protocol`), TLS 1.3 for both ends
(:mod:`gameday.wire.tls`) and the client the orchestrator, the lab and tests reach an
agent with (:mod:`gameday.wire.agent_client`). It imports only the bottom of the house
(``gameday.errors``, ``gameday.contract``), so the engine, targets, safety and the agent
all stand on it.
"""
