// The console's small behaviours that need a script: the phone menu.
document.documentElement.classList.add("js");
document.addEventListener("click", (event) => {
  const toggle = event.target.closest(".nav-toggle");
  if (!toggle) return;
  const bar = toggle.closest(".topbar");
  const open = bar.classList.toggle("nav-open");
  toggle.setAttribute("aria-expanded", String(open));
});
