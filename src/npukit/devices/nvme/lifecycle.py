"""A fabrics queue's connection state, with every allowed transition in one table.

NVMe/TCP: the host's ICReq must come first (TCP transport 1.0, 3.6.1), then the Connect command
binds the queue to a controller (Fabrics 1.1, 3.3); a Disconnect, or the transport going away,
ends it. With worker processes (workers.py) a live I/O queue is handed over: the main process's
side of it ends there, the worker's starts LIVE. Before this enum a connection kept four flags
(IC done, controller bound, disconnect asked, closed) whose combinations were implicit.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class QueueState(enum.Enum):
    AWAIT_IC_REQ = "await ICReq"
    AWAIT_CONNECT = "await Connect"
    LIVE = "live"
    DISCONNECTING = "disconnecting"
    HANDED_OVER = "handed over"  # a live I/O queue whose socket now belongs to a worker process
    CLOSED = "closed"


class QueueEvent(enum.Enum):
    IC_REQ = "ICReq"
    CONNECT = "Connect"
    DISCONNECT = "Disconnect"
    HAND_OVER = "hand over"
    CLOSE = "close"


# (state, event) -> next state. Closing is allowed from every state (a dropped socket, a fatal PDU).
TRANSITIONS: dict[tuple[QueueState, QueueEvent], QueueState] = {
    (QueueState.AWAIT_IC_REQ, QueueEvent.IC_REQ): QueueState.AWAIT_CONNECT,
    (QueueState.AWAIT_CONNECT, QueueEvent.CONNECT): QueueState.LIVE,
    (QueueState.LIVE, QueueEvent.DISCONNECT): QueueState.DISCONNECTING,
    (QueueState.LIVE, QueueEvent.HAND_OVER): QueueState.HANDED_OVER,
    **{(state, QueueEvent.CLOSE): QueueState.CLOSED for state in QueueState},
}


class TransitionError(RuntimeError):
    """An event that the current state does not allow: a bug in the caller, not bad input
    (the transport checks PDU order and answers the host before it advances the state)."""


@dataclass
class QueueLifecycle:
    state: QueueState = QueueState.AWAIT_IC_REQ

    def advance(self, event: QueueEvent) -> QueueState:
        try:
            self.state = TRANSITIONS[(self.state, event)]
        except KeyError:
            raise TransitionError(f"{event.value} in state {self.state.value}") from None
        return self.state

    @property
    def initialized(self) -> bool:
        """The ICReq/ICResp exchange is done (digests apply from here on)."""
        return self.state is not QueueState.AWAIT_IC_REQ

    @property
    def closed(self) -> bool:
        return self.state is QueueState.CLOSED
