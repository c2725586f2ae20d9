"""Drives the support dashboard in headless Chromium (Playwright with the system's Chromium), as a support person
would: sign in, search an order ID, open the customer, extend a subscription after confirming; then (second phase,
after the App Store's RENEWAL_EXTENDED has been delivered) see the audit entry and the change in the timeline.

Usage: dashboard_flow.py extend|verify  (environment: DASHBOARD_URL, DASHBOARD_KEY (never printed), ORDER_ID,
CUSTOMER_ID, SCREENSHOTS (a directory), CHROMIUM (the browser's path)). Prints one line per check; exit 1 on the
first that fails."""

import os
import sys

from playwright.sync_api import sync_playwright

base = os.environ["DASHBOARD_URL"]
key = os.environ["DASHBOARD_KEY"]
shots = os.environ["SCREENSHOTS"]
phase = sys.argv[1]


def check(condition, what):
    print(("ok: " if condition else "FAILED: ") + what, flush=True)
    if not condition:
        sys.exit(1)


def shot(page, name):
    page.screenshot(path=os.path.join(shots, name + ".png"), full_page=True)


def sign_in(page):
    page.goto(base + "/dashboard")
    check(page.url.endswith("/dashboard/login"), "signed out, the dashboard sends to the sign-in page")
    if phase == "extend":
        shot(page, "dashboard-sign-in")
    page.fill("#key", key)
    page.press("#key", "Enter")  # the keyboard alone signs in
    page.wait_for_url(base + "/dashboard")
    check("Active subscribers" in page.inner_text("main"), "signed in: the overview shows its figures")


with sync_playwright() as playwright:
    browser = playwright.chromium.launch(executable_path=os.environ.get("CHROMIUM", "/usr/bin/chromium"), args=["--no-sandbox"])
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    sign_in(page)
    if phase == "extend":
        shot(page, "dashboard-overview")
        page.fill("#q", os.environ["ORDER_ID"])
        page.press("#q", "Enter")
        page.wait_for_url("**/dashboard/customers/**")
        main = page.inner_text("main")
        check("Customer " + os.environ["CUSTOMER_ID"] in main, "the order ID finds the customer and opens their page")
        check("pro.monthly" in main and "Timeline" in main, "their page shows the subscription and the timeline")
        shot(page, "dashboard-customer")
        page.click("text=Extend…")
        page.wait_for_url("**/extend?**")
        check("Confirm: extend at the App Store" in page.inner_text("main"), "extending asks for confirmation first")
        page.fill("#days", "7")
        page.select_option("#reason", "3")
        page.fill("#note", "outage of 11-24 <b>bold?</b>")
        shot(page, "dashboard-extend")
        page.click("text=Confirm: extend at the App Store")
        page.wait_for_load_state()
        main = page.inner_text("main")
        check("Extended" in main and "by 7 days" in main, "the App Store extended it: " + main.splitlines()[0])
        shot(page, "dashboard-extended")
    else:
        page.goto(base + "/dashboard/customers/" + os.environ["CUSTOMER_ID"] + "?environment=Production")
        main = page.inner_text("main")
        check("extend-renewal-date" in main and "done" in main, "the audit log shows the extension, done, by the key's name")
        check("subscription.renewal_extended" in main, "the timeline shows RENEWAL_EXTENDED's effect")
        check("<b>bold?" in main, "the note is shown as text, not markup")
        shot(page, "dashboard-customer-after")
        customer = page.url
        page.click("text=Grant a promotional entitlement…")
        page.wait_for_url("**/promotional-entitlements/new?**")
        check("Confirm: grant" in page.inner_text("main"), "granting a promotional entitlement asks for confirmation first")
        page.fill("#entitlement", "pro")
        page.fill("#days", "30")
        page.fill("#reason", "sorry for the outage")
        shot(page, "dashboard-grant")
        page.click("text=Confirm: grant")
        page.wait_for_load_state()
        check("Granted" in page.inner_text("main"), "the grant is confirmed")
        page.goto(customer)
        main = page.inner_text("main")
        check("promotional grant" in main and "grant-promotional-entitlement" in main and "promotional.granted" in main,
              "the customer page shows the entitlement as a promotional grant, its audit record and its event")
        phone = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
        small = phone.new_page()
        sign_in(small)
        small.goto(page.url)
        check(small.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), "at a phone's width nothing but the tables scrolls sideways")
        shot(small, "dashboard-customer-phone")
        page.click("text=Sign out")
        page.wait_for_url("**/dashboard/login")
        page.goto(base + "/dashboard")
        check(page.url.endswith("/dashboard/login"), "signed out, the session no longer opens the dashboard")
    browser.close()
