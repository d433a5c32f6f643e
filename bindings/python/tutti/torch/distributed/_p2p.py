"""Point-to-point messages of backend "tutti" (send, recv)."""


def _unsupported(op):
    raise RuntimeError("tutti backend does not support %s yet; use a gloo group for it "
                       "(dist.new_group(backend='gloo'))" % op)


def send(group, tensors, dst, tag):
    _unsupported("send")


def recv(group, tensors, src, tag):
    _unsupported("recv")


def recv_anysource():
    _unsupported("recv_anysource (a receive from any rank)")
