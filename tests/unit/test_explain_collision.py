"""kit.explain on a second default MirroredStrategy's collective colliding with a first one's (the message
TensorFlow 2.21 gave in tests/claims/test_nb01_claims.py), told apart from synchronized BatchNormalization's."""
from __future__ import annotations

import gputrain_kit as kit

COLLISION = (
    "Graph execution error:\n\nDetected at node adam_1/CollectiveReduceV2_1 defined at (most recent call last):\n"
    "  File \"x.py\", line 15, in <module>\n\nCollective ops is aborted by: Shape mismatch in the collective "
    "instance 100. Op at device /job:localhost/replica:0/task:0/device:CPU:1 expected shape [2778] but another "
    "member in the group expected shape [4810]. This is likely due to different input shapes at different members "
    "of the collective op.\nThe error could be from a previous operation. Restart your program to reset.\n"
    "\t [[{{node adam_1/CollectiveReduceV2_1}}]] [Op:__inference_multi_step_on_iterator_6201]")


def test_a_mismatch_in_the_optimizers_all_reduce_is_a_second_strategys_collision():
    found = kit.explain(COLLISION)
    assert found.key == "collective-instance-collision"
    text = str(found).replace("\n", " ")
    assert "instance 100's all-reduce had gradients packed as [2778] on CPU:1 where its group expected [4810]" in text
    assert "BatchNormalization" not in text and "ReductionToOneDevice" in text and "restart the kernel" in text


def test_a_mismatch_elsewhere_stays_the_batchnorm_explanation_and_names_the_other_cause():
    batchnorm = COLLISION.replace("adam_1/CollectiveReduceV2_1", "sequential/batch_normalization/CollectiveReduceV2")
    found = kit.explain(batchnorm)
    assert found.key == "collective-shape-mismatch"
    assert "collective-instance-collision" in str(found).replace("\n", " ")
    bare = "Collective ops is aborted by: Shape mismatch in the collective instance 100."
    assert kit.explain(bare).key == "collective-shape-mismatch"
