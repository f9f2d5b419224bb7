// Copy buttons on each code block and each answer. Added here, not in the HTML:
// without JavaScript there is no button that could not work.
(() => {
  "use strict";
  const ANSWERS = ".bubble.assistant.markdown";
  const CODE = ".markdown pre";

  async function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
      return;
    }
    // Plain http on a LAN has no clipboard API: the old selection route still works.
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    const copied = document.execCommand("copy");
    area.remove();
    if (!copied) throw new Error("copy refused");
  }

  function textOf(element) {
    const clone = element.cloneNode(true);
    clone.querySelectorAll("button.copy").forEach((button) => button.remove());
    return clone.textContent.trim();
  }

  function button(label, source) {
    const copy = document.createElement("button");
    copy.type = "button";
    copy.className = "copy small";
    copy.textContent = "Copy";
    copy.setAttribute("aria-label", label);
    copy.addEventListener("click", async () => {
      try {
        await copyText(textOf(source));
        copy.textContent = "Copied";
      } catch (error) {
        copy.textContent = "Copy failed";
      }
      setTimeout(() => { copy.textContent = "Copy"; }, 1500);
    });
    return copy;
  }

  function decorate(root) {
    root.querySelectorAll(CODE).forEach((pre) => {
      if (pre.classList.contains("plain") || pre.querySelector(":scope > button.copy")) return;
      pre.appendChild(button("Copy code", pre.querySelector("code") || pre));
    });
    root.querySelectorAll(ANSWERS).forEach((answer) => {
      const next = answer.nextElementSibling;
      if (next && next.matches("button.copy")) return;
      answer.after(button("Copy answer", answer));
    });
  }

  decorate(document);
  // Answers arrive later on the chat page (socket frames, catch-up, htmx swaps).
  new MutationObserver((changes) => {
    for (const change of changes) {
      change.addedNodes.forEach((node) => {
        if (node.nodeType === Node.ELEMENT_NODE && !node.matches("button.copy")) {
          decorate(node.parentElement || node);
        }
      });
    }
  }).observe(document.body, { childList: true, subtree: true });
})();
