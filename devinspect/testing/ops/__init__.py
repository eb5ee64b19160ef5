"""How the simulated device runs PyTorch's operators as CUDA runs them: which calls raise a
device error (:mod:`.device_rules`, from the operators' declarations in :mod:`.op_declarations`),
ops whose composite kernel runs on the device (:mod:`.plain_paths`), first gradients of a
backward pass (:mod:`.gradients`), the fused recurrent cells (:mod:`.recurrent`), autocast."""
