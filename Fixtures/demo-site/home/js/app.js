document.getElementById("status").textContent = "served offline by offlinepkg";
