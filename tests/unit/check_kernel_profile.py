#!/usr/bin/env python3
"""tools/kernel_profile.py on two real ncu logs (tests/data/ncu): a run's first 6 kernels, and a
longer run with the same 6 then 4 more. The step is those 4, in launch order, with ncu's times."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "kernel_profile.py")
DATA = os.path.join(ROOT, "tests", "data", "ncu")
sys.path.insert(0, os.path.join(ROOT, "tools"))
import kernel_profile  # noqa: E402


class KernelProfileTest(unittest.TestCase):
    def test_the_longer_runs_extra_kernels_are_the_step(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "step.json")
            run = subprocess.run([sys.executable, TOOL, os.path.join(DATA, "short.csv"), os.path.join(DATA, "long.csv"),
                                  "--json", out], capture_output=True, text=True, check=True)
            step = json.load(open(out))
        names = [k["kernel"] for k in step["kernels"]]
        self.assertEqual(names, ["nvjet_sm90_tst_128x16_64x11_2x1_v_bz_TNT", "silu_and_mul_kernel",
                                 "nvjet_sm90_tst_64x16_64x16_4x1_v_bz_splitK_TNT", names[3]])
        self.assertTrue(names[3].startswith("splitKreduce_kernel<32, 16, int, float, __nv_bfloat16"))
        self.assertEqual([k["us"] for k in step["kernels"]], [18.88, 3.104, 11.968, 3.488])
        self.assertAlmostEqual(step["total_us"], 37.44, places=3)
        self.assertEqual(step["by_name"][0]["kernel"], names[0])  # costliest first
        self.assertIn("one decode step: 4 kernels, 37.4 us", run.stdout)

    def test_the_summary_says_what_the_extra_kernels_are(self):
        run = subprocess.run([sys.executable, TOOL, os.path.join(DATA, "short.csv"), os.path.join(DATA, "long.csv"),
                              "--what", "one 2048-token prefill", "--top", "1"], capture_output=True, text=True,
                             check=True)
        self.assertTrue(run.stdout.startswith("one 2048-token prefill: 4 kernels, 37.4 us"), run.stdout)

    def test_names_lose_namespaces_arguments_and_return_types(self):
        self.assertEqual(kernel_profile.short_name(
            "void tachyon::kernels::cuda::(anonymous namespace)::gemv_kernel<1, __nv_bfloat16, "
            "tachyon::kernels::cuda::(anonymous namespace)::Bf16Weights>(T2 *, const __nv_bfloat16 *, int)"),
            "gemv_kernel<1, __nv_bfloat16, Bf16Weights>")
        self.assertEqual(kernel_profile.short_name("tachyon::<unnamed>::resolve_deferred_kernel(int *, const int *)"),
                         "resolve_deferred_kernel")

    def test_runs_that_differ_before_the_step_are_refused(self):
        rows = kernel_profile.load(os.path.join(DATA, "short.csv"))
        other = [("other_kernel",) + r[1:] for r in rows] + rows[:1]
        with self.assertRaisesRegex(ValueError, "different kernels"):
            kernel_profile.one_step(rows, other)
        with self.assertRaisesRegex(ValueError, "one more output token"):
            kernel_profile.one_step(rows, rows)


if __name__ == "__main__":
    unittest.main()
