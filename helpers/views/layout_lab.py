"""The layout lab (notebook 10): pick a model and a layout, see at once whether it is valid (named
violations with fixes) and which rank sits in which group, then run it as a real job.

Everything a click does is also a method (`set`, `refresh`, `run`), so papermill drives the same
panel without clicks. Notebook side only: the job itself goes through helpers.launch."""
from __future__ import annotations

import dataclasses
import html

import ipywidgets as W
import matplotlib.pyplot as plt
from IPython.display import display

from helpers import launch
from helpers.job import models
from helpers.job.layout import Layout
from helpers.launch import probe
from helpers.views import rank_grids
from helpers.views.curves import plot_losses

CPU_PARAM_LIMIT = 50_000_000  # a CPU job beyond this many parameters takes minutes per iteration
SIZES = ["tp", "pp", "cp", "ep", "etp"]


def _int(description: str, value: int, lo: int = 0, hi: int = 4096) -> W.BoundedIntText:
    return W.BoundedIntText(value=value, min=lo, max=hi, description=description,
                            layout=W.Layout(width="150px"), style={"description_width": "70px"})


class LayoutLab:
    def __init__(self, model: str = "control-moe-cpu", nodes: int = 1, gpus_per_node: int = 4, tp: int = 2,
                 pp: int = 1, vpp: int = 0, cp: int = 1, ep: int = 2, etp: int = 1, sp: bool = True,
                 first_stage_layers: int = 0, last_stage_layers: int = 0,
                 micro_batch: int = 2, global_batch: int = 8, seq_len: int = 64, backend: str = "local",
                 iters: int = 5, device: str = "cpu", pictures: bool = True, progress: bool = True):
        self.w = dict(
            model=W.Dropdown(options=models.names(), value=model, description="model"),
            nodes=_int("nodes", nodes, 1), gpus_per_node=_int("per node", gpus_per_node, 1),
            **{k: _int(k.upper(), v, 1) for k, v in dict(tp=tp, pp=pp, cp=cp, ep=ep, etp=etp).items()},
            vpp=_int("VPP", vpp, 0),
            sp=W.Checkbox(value=sp, description="SP (sequence parallel)", indent=False),
            first_stage_layers=_int("first stage", first_stage_layers), last_stage_layers=_int("last stage", last_stage_layers),
            micro_batch=_int("micro", micro_batch, 1), global_batch=_int("global", global_batch, 0),
            seq_len=_int("seq len", seq_len, 1, 1 << 20),
            backend=W.Dropdown(options=[("local: the kit's worker (no TE)", "local"),
                                        ("te: plan for Megatron + Transformer Engine", "te")],
                               value=backend, description="backend"),
            iters=_int("iters", iters, 1), device=W.Dropdown(options=["cpu", "cuda", "auto"], value=device,
                                                             description="device"),
        )
        self.pictures, self.progress = pictures, progress
        self.status, self.result, self.grids = W.HTML(), W.Output(), W.Output()
        self.memory_out = W.Output()  # memory bars per pipeline stage (helpers/views/memory_bars.py)
        self.button = W.Button(description="Run this layout", button_style="primary", icon="play")
        self.button.on_click(lambda _: self.run())
        for widget in self.w.values():
            widget.observe(self.refresh, names="value")
        self.violations, self.last_run, self._ran, self._hold = [], None, None, False
        self.refresh()

    # ---- reading the panel --------------------------------------------------------------
    @property
    def model(self) -> models.ModelPreset:
        return models.preset(self.w["model"].value)

    @property
    def layout(self) -> Layout:
        v = {k: w.value for k, w in self.w.items()}
        return Layout(tp=v["tp"], pp=v["pp"], vpp=v["vpp"] or None, cp=v["cp"], ep=v["ep"], etp=v["etp"],
                      sp=v["sp"], nproc=v["nodes"] * v["gpus_per_node"], gpus_per_node=v["gpus_per_node"],
                      first_stage_layers=v["first_stage_layers"] or None, last_stage_layers=v["last_stage_layers"] or None,
                      micro_batch=v["micro_batch"], global_batch=v["global_batch"] or None,
                      seq_len=v["seq_len"], backend=v["backend"])

    def set(self, **values) -> "LayoutLab":
        """Change fields as a user would; the panel refreshes once, after the last change."""
        self._hold = True
        try:
            for k, value in values.items():
                self.w[k].value = value
        finally:
            self._hold = False
        self.refresh()
        return self

    def launch_blockers(self) -> list[str]:
        """Why the Run button would not start a job (empty = it will)."""
        local = dataclasses.replace(self.layout, backend="local")  # jobs always run on the kit's worker
        out = [f"{v.name}: {v.message}" for v in local.validate(self.model)]
        if self.w["backend"].value != "local":
            out.insert(0, "jobs run on the kit's local backend (no TE); switch backend to 'local' to launch")
        if self.w["device"].value == "cpu" and self.model.approx_params() > CPU_PARAM_LIMIT:
            out.append(f"{self.model.name} has ~{self.model.approx_params() / 1e9:.1f}B parameters: too big "
                       "for a CPU job (plan it here; run tiny-*, control-moe-cpu on CPU)")
        return out

    # ---- drawing ------------------------------------------------------------------------
    def refresh(self, *_):
        if self._hold:
            return
        lay, model = self.layout, self.model
        if self.last_run is not None and self._ran != (lay, model.name):  # that result is another layout's
            self.result.clear_output()
            self.last_run = None
        self.violations = lay.validate(model)
        self.status.value = self._status_html(lay, model)
        blockers = self.launch_blockers()
        self.button.disabled = bool(blockers)
        self.button.tooltip = "; ".join(blockers)[:300]
        if not self.pictures:
            return
        self._draw_memory(lay, model)
        self.grids.clear_output(wait=True)
        with self.grids:
            if any(v.category == "world" for v in self.violations):
                print("no rank grid: the world size does not factor into these sizes")
                return
            if model.is_moe and lay.world_size <= 8:  # small: dense and expert side by side
                figs = [rank_grids.rank_grids(lay)]
            else:
                figs = [rank_grids.rank_grid(lay, kind) for kind in (("dense", "expert") if model.is_moe else ("dense",))]
            for fig in figs:
                display(fig)
                plt.close(fig)

    def _status_html(self, lay: Layout, model: models.ModelPreset) -> str:
        n = model.approx_params()
        size = f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"
        head = (f"<b>{html.escape(model.name)}</b>: {model.num_layers} layers, ~{size} parameters "
                f"<span style='color:#666'>(global 0 = micro x DP; VPP 0 = off; first/last 0 = even split)</span>"
                f"<br><b>layout</b>: {html.escape(lay.describe())}")
        if not self.violations:
            body = "<p style='color:#1a7f37'><b>valid</b> for this model and backend</p>"
        else:
            rows = "".join(f"<tr><td><code>{v.name}</code></td><td>{html.escape(v.message)}</td>"
                           f"<td>{html.escape(v.fix)}</td></tr>" for v in self.violations)
            body = (f"<p style='color:#b42318'><b>{len(self.violations)} problem(s)</b></p>"
                    "<table><tr><th>constraint</th><th>why</th><th>suggested fix</th></tr>" + rows + "</table>")
        advice = "".join(f"<li>{html.escape(a)}</li>" for a in lay.advice())
        return head + body + (f"<p>advice:</p><ul>{advice}</ul>" if advice else "")

    def _draw_memory(self, lay: Layout, model: models.ModelPreset):
        """The memory plan of this layout (helpers/memory/plan.py): bars per pipeline stage, GPU size line."""
        from helpers.memory import Training, plan_memory
        from helpers.views.memory_bars import memory_bars
        self.plan = None
        if self.violations:  # no plan for an invalid layout: clear the last one now, not on the next draw
            self.memory_out.clear_output()
            return
        self.memory_out.clear_output(wait=True)
        with self.memory_out:
            cpu = self.w["device"].value == "cpu"
            plan = plan_memory(model, lay, Training(precision="fp32" if cpu else "bf16"))
            ax = memory_bars(plan, device_gib=None if cpu else 80,
                             title=f"memory per GPU ({'fp32, CPU' if cpu else 'bf16; line: an 80 GiB GPU'})")
            display(ax.figure)
            plt.close(ax.figure)
            self.plan = plan

    # ---- running ------------------------------------------------------------------------
    def run(self):
        """Launch the layout as a real job and show its loss; returns the RunDir (None if refused)."""
        self.result.clear_output()
        with self.result:
            blockers = self.launch_blockers()
            if blockers:
                print("not launched:\n  " + "\n  ".join(blockers))
                return None
            spec = self.layout.job_spec(self.model.name, iters=self.w["iters"].value, device=self.w["device"].value,
                                        name=f"lab-{self.model.name}")
            print(f"running {self.layout.describe()} ...")
            try:
                run = launch.run(spec, progress=self.progress)
            except (launch.InvalidJob, launch.JobFailed) as e:
                print(f"{type(e).__name__}: {e}")
                return None
            self.last_run, self._ran = run, (self.layout, self.model.name)
            same = probe.mismatches(Layout.of(run.spec), run.groups) == []
            print(f"final loss {run.final_loss:.4f} after {run.metrics[-1]['iteration']} iteration(s); live process groups "
                  f"{'match' if same else 'DIFFER from'} the predicted rank grid | {run.path.name}")
            short = self.layout.describe().split(": ", 1)[1].split(";")[0]  # "dense TP2 CP1 DP2 PP1 +SP"
            fig, ax = plt.subplots(figsize=(6, 3))
            plot_losses({short: run}, title=f"{self.model.name}: loss", ax=ax)
            plt.show()
        return run

    # ---- the panel ----------------------------------------------------------------------
    def widget(self) -> W.Widget:
        w = self.w
        return W.VBox([
            W.HBox([w["model"], w["backend"]]),
            W.HBox([w["nodes"], w["gpus_per_node"], w["seq_len"], w["micro_batch"], w["global_batch"]]),
            W.HBox([w[k] for k in SIZES] + [w["vpp"], w["sp"]]),
            W.HBox([W.HTML("uneven pipeline, layers on the"), w["first_stage_layers"], w["last_stage_layers"]]),
            self.status,
            W.HBox([self.button, w["iters"], w["device"]]),
            self.result,
            self.grids,
            self.memory_out,
        ])

    def _ipython_display_(self):
        display(self.widget())
