// The chat's paperclip: a document into the agent's memory without leaving the chat.
// The hidden form's fields go to memory-document-upload by XHR (fetch reports no upload
// progress) as an htmx request, so the view answers with the note to show
// (templates/memory/_upload_note.html), which takes the place of the progress note.
(() => {
  "use strict";
  const form = document.getElementById("attach");
  const button = document.getElementById("attach-button");
  const picker = document.getElementById("attach-file");
  const events = document.getElementById("events");
  const announcer = document.getElementById("announcer");
  if (!form || !button || !picker || !events) return;

  button.addEventListener("click", () => picker.click());
  picker.addEventListener("change", () => {
    if (picker.files.length) upload(picker.files[0]);
  });

  function show(item) {
    events.querySelector(".empty-chat")?.remove();
    events.appendChild(item);
    events.scrollTop = events.scrollHeight;
  }

  function answered(request) {
    // The view's note, or nothing (a 404 or a proxy's error page is no note).
    const template = document.createElement("template");
    template.innerHTML = request.responseText.trim();
    const item = template.content.firstElementChild;
    return item && item.matches("li.note.upload") ? item : null;
  }

  function upload(file) {
    const note = document.createElement("li");
    note.className = "note upload pending";
    const say = (text) => { note.textContent = text; };
    say(`Uploading ${file.name}… 0 %`);
    show(note);
    const data = new FormData(form);  // holds the chosen file: the picker can be reset
    picker.value = "";
    button.disabled = true;
    let converting = false;
    let result = note;
    const request = new XMLHttpRequest();
    request.open("POST", form.action);
    request.setRequestHeader("HX-Request", "true");
    request.upload.addEventListener("progress", (event) => {
      if (converting || !event.lengthComputable) return;
      say(`Uploading ${file.name}… ${Math.floor((100 * event.loaded) / event.total)} %`);
    });
    request.upload.addEventListener("load", () => {
      converting = true;  // sent: the server converts and indexes it now
      say(`Converting ${file.name}…`);
    });
    request.addEventListener("load", () => {
      const item = answered(request);
      if (item) {
        note.replaceWith(item);
        result = item;
        events.scrollTop = events.scrollHeight;
      } else {
        note.classList.replace("pending", "error");
        say(`Not added to memory: the server answered ${request.status} ${request.statusText}.`.trim());
      }
    });
    request.addEventListener("error", () => {
      note.classList.replace("pending", "error");
      say(`Not added to memory: ${file.name} could not be sent (is the connection lost?).`);
    });
    request.addEventListener("loadend", () => {
      button.disabled = false;
      if (announcer) announcer.textContent = result.textContent;
    });
    request.send(data);
  }
})();
