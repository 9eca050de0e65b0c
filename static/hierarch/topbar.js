// The bar at the top of every page (templates/console/_topbar.html): on a phone its links fold
// under "Menu", which this opens and closes. Without it the links stay shown, wrapped.
document.documentElement.classList.add("js");
document.addEventListener("click", (event) => {
  const toggle = event.target.closest(".topbar .nav-toggle");
  if (!toggle) return;
  const bar = toggle.closest(".topbar");
  const open = bar.classList.toggle("nav-open");
  toggle.setAttribute("aria-expanded", String(open));
});
