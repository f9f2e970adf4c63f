"""placeholder"""
def model_flops_per_sample(run_cfg):
    raise NotImplementedError
