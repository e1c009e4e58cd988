"""A library made in one module and ops defined through it from others, as vLLM's
``direct_register_custom_op`` does (``vllm/utils/torch_utils.py``): the dispatcher records this
file, not the module that defined the op."""

import torch

user_lib = torch.library.Library("pmverify_user_lib", "FRAGMENT")


def register_op(name, function, fake):
    user_lib.define(name + torch.library.infer_schema(function, mutates_args=()))
    user_lib.impl(name, function, "CompositeExplicitAutograd")
    user_lib._register_fake(name, fake)
