"""One real local Ray cluster (2 CPUs) for every test that asks for ``local_ray``."""

import pytest


@pytest.fixture(scope="session")
def local_ray():
    import ray

    from trainer.distributed.session import start_local_ray

    start_local_ray(num_cpus=2)
    yield
    ray.shutdown()
