"""The search page and a bulk requeue of a filtered set in a real browser
(headless Chromium, as tests/test_dashboard_browser.py), in read-only mode
too. Few and fast: the httpx tests (test_dashboard_search.py) cover the rest."""

from __future__ import annotations

from typing import Any

from chronos_trio import JobState
from tests.test_dashboard_browser import browser, browser_fresh, job_state, served, wait_for

__all__ = ["browser", "browser_fresh"]


def test_search_then_bulk_requeue_of_the_filtered_set(browser_fresh: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver = browser_fresh
    with served() as dash:
        driver.get(f"{dash.url}/")
        driver.find_element(By.LINK_TEXT, "Search").click()
        wait_for(driver, lambda d: d.title.startswith("Search jobs"))
        Select(driver.find_element(By.ID, "f-queue")).select_by_value("default")
        driver.find_element(By.ID, "f-state-dead").click()
        driver.find_element(By.ID, "search").click()
        wait_for(
            driver, lambda d: "state=dead" in d.current_url and "queue=default" in d.current_url
        )
        rows = driver.find_elements(By.CSS_SELECTOR, "#results tbody tr")
        assert sorted(r.find_element(By.TAG_NAME, "code").text for r in rows) == [
            "dead-1",
            "dead-2",
        ]
        # "select every row" ticks the rows' boxes (our script runs under the CSP)
        driver.find_element(By.ID, "select-all").click()
        assert all(b.is_selected() for b in driver.find_elements(By.CSS_SELECTOR, "input.pick"))
        driver.find_element(By.ID, "scope-all").click()
        driver.find_element(By.ID, "bulk-requeue").click()
        wait_for(driver, lambda d: d.title.startswith("Requeue 2 job(s)?"))
        assert driver.find_element(By.ID, "count").text == "2"
        assert job_state(dash, "dead-1") is JobState.DEAD, "the confirmation changes nothing"
        driver.find_element(By.ID, "confirm").click()
        wait_for(driver, lambda d: d.find_elements(By.CLASS_NAME, "flash"))
        assert "Requeue: 2 done, 0 skipped" in driver.find_element(By.CLASS_NAME, "flash").text
        assert job_state(dash, "dead-1") is JobState.READY
        assert job_state(dash, "dead-2") is JobState.READY
        assert job_state(dash, "xss-1") is JobState.DEAD, "not in the filtered set"
        assert "state=dead" in driver.current_url, "back on the same search"
        assert driver.find_elements(By.ID, "no-results")


def test_read_only_search_has_no_checkboxes_or_bulk_buttons(browser_fresh: Any) -> None:
    from selenium.webdriver.common.by import By

    driver = browser_fresh
    with served(read_only=True) as dash:
        driver.get(f"{dash.url}/search?state=dead")
        wait_for(driver, lambda d: d.find_elements(By.ID, "results"))
        assert len(driver.find_elements(By.CSS_SELECTOR, "#results tbody tr")) == 3
        assert driver.find_elements(By.CSS_SELECTOR, "input[type=checkbox][name=job]") == []
        assert driver.find_elements(By.CSS_SELECTOR, "[id^=bulk-], #select-all") == []
        assert driver.find_elements(By.CSS_SELECTOR, "form[method=post]") == []
        driver.get(f"{dash.url}/search/confirm?action=requeue&scope=all&state=dead")
        assert "this dashboard is read-only" in driver.find_element(By.TAG_NAME, "main").text
        assert job_state(dash, "dead-1") is JobState.DEAD
