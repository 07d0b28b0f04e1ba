"""The workflow page in a real browser (headless Chromium, as
tests/test_dashboard_browser.py): the steps are laid out as drawn (a chain
left to right, a group's members one under the other), and the abort
button cancels the flow through its confirmation page."""

from __future__ import annotations

from typing import Any

import trio

from chronos_trio import App, JobState, MemoryStore
from tests._dashboard import ServedDashboard
from tests.test_dashboard_browser import browser, browser_fresh, wait_for  # noqa: F401
from tests.test_dashboard_workflows import started


def test_the_workflow_page_draws_the_flow_and_aborts_it(browser_fresh: Any) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    driver = browser_fresh
    app = App(MemoryStore())
    trio.run(started, app, "flow-1")
    with ServedDashboard(app) as dash:
        driver.get(f"{dash.url}/job?id=flow-1.0")
        wait_for(driver, lambda d: d.title.startswith("Job flow-1.0"))
        driver.find_element(By.ID, "workflow-link").click()
        wait_for(driver, lambda d: d.title.startswith("Workflow flow-1"))
        assert driver.find_element(By.ID, "workflow-state").text == "running"

        def box(step: str) -> Any:
            return driver.find_element(By.ID, f"step-flow-1.{step}").rect

        first, a, b, last = box("0"), box("1.0"), box("1.1"), box("2")
        assert first["x"] < a["x"] < last["x"], "a chain runs left to right"
        assert a["x"] == b["x"] and a["y"] < b["y"], "a group's members stack"
        driver.find_element(By.ID, "action-abort-workflow").click()
        wait_for(driver, lambda d: d.title.startswith("Abort workflow?"))
        driver.find_element(By.ID, "confirm").click()
        wait_for(driver, lambda d: d.find_elements(By.CLASS_NAME, "flash"))
        assert "workflow flow-1 cancelled" in driver.find_element(By.CLASS_NAME, "flash").text
        assert driver.find_element(By.ID, "workflow-state").text == "cancelled"
        job = dash.call(app.store.get_job, "flow-1.0")
        assert job is not None and job.state is JobState.ABORTED
